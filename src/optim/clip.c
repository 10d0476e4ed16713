/* optim/clip.c - gradient clipping (PyTorch's clip_grad_norm_ and
 * clip_grad_value_) and the walk over a parameter list's gradients that it
 * and the training step split over the worker pool. */
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

static void grad_ranges_range(void *arg, int64_t lo, int64_t hi) {
    const grad_ranges_job *j = arg;
    int k = 0;
    while (k < j->n && j->ends[k] <= lo) k++;
    for (; k < j->n && lo < hi; k++) {
        int64_t start = k ? j->ends[k - 1] : 0, end = j->ends[k] < hi ? j->ends[k] : hi;
        j->fn(nb_list_tensor(j->l, j->idx[k]), (size_t)(lo - start), (size_t)(end - start),
              j->arg);
        lo = end;
    }
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

double nb_clip_grad_norm(const nb_tensor_list *params, double max_norm) {
    if (!nb_list_valid(params)) return NAN;
    /* four partial sums (element j into s[j % 4] within each tensor), added
     * up at the end: the adds do not wait on each other, the order is fixed */
    double s[4] = {0, 0, 0, 0};
    for (int i = 0; i < params->n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        if (!has_float_grad(t)) continue;
#define K(T)                                                        \
    {                                                               \
        const T *g = t->grad;                                       \
        size_t j = 0;                                               \
        for (; j + 4 <= t->numel; j += 4)                           \
            for (int l = 0; l < 4; l++)                             \
                s[l] += (double)g[j + l] * (double)g[j + l];        \
        for (; j < t->numel; j++) s[0] += (double)g[j] * (double)g[j]; \
    }
        NB_DISPATCH(t->dtype, K);
#undef K
    }
    const double total = sqrt((s[0] + s[1]) + (s[2] + s[3]));
    double coef = max_norm / (total + 1e-6);
    if (coef < 1.0) nb_grad_ranges(params, scale_range, &coef); /* on every thread */
    return total;
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
