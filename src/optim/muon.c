/* optim/muon.c - Muon (Keller Jordan's muon.py): momentum, then the update
 * orthogonalized by the quintic Newton-Schulz iteration, and its pairing
 * with AdamW for the parameters that are not matrices (MuonWithAuxAdam).
 * The rules are in include/nabla/optim.h; the products run on nabla's gemm
 * (all threads, or whole matrices shared out one a thread), the elementwise
 * passes split over the threads too. Wide matrices iterate on their Gram
 * matrix (newton_schulz_gram): a third fewer multiply-adds at n = 3m. */
#include "kernels/kernels_internal.h"
#include "optim/optim_internal.h"

#include <stdlib.h>

/* The quintic's coefficients, as muon.py gives them. */
#define NS_A 3.4445
#define NS_B (-4.7750)
#define NS_C 2.0315
#define NS_EPS 1e-7
#define MUON_GRAIN 8192 /* elements worth a thread */
/* The quintic settles in a handful of steps (muon.py takes 5); a count far
 * beyond that is a mistake, and would tie the step up for hours. */
#define MUON_MAX_NS_STEPS 1000

nb_muon_opts nb_muon_defaults(void) {
    return (nb_muon_opts){.lr = 0.02, .momentum = 0.95, .nesterov = true, .ns_steps = 5,
                          .weight_decay = 0};
}

/* The `!(x > 0)` forms also refuse NaN. */
static nb_status check_muon_opts(nb_ctx *err, const nb_muon_opts *o) {
    if (!(o->lr > 0) || isinf(o->lr))
        return nb_ctx_fail(err, NB_ERR_VALUE, "muon: lr = %g, expected a finite value > 0", o->lr);
    if (!(o->momentum >= 0 && o->momentum < 1))
        return nb_ctx_fail(err, NB_ERR_VALUE, "muon: momentum = %g is outside [0, 1)",
                           o->momentum);
    if (o->ns_steps < 1 || o->ns_steps > MUON_MAX_NS_STEPS)
        return nb_ctx_fail(err, NB_ERR_VALUE, "muon: ns_steps = %d, expected 1 to %d",
                           o->ns_steps, MUON_MAX_NS_STEPS);
    if (!(o->weight_decay >= 0))
        return nb_ctx_fail(err, NB_ERR_VALUE, "muon: weight_decay = %g, expected >= 0",
                           o->weight_decay);
    return NB_OK;
}

/* A Muon parameter as a matrix: rows = shape[0], cols = the rest. */
static void matrix_of(const nb_tensor *p, int64_t *rows, int64_t *cols) {
    *rows = p->shape[0];
    *cols = (int64_t)p->numel / p->shape[0];
}

/* Scratch bytes for one parameter: X and BX (m, n), and four (m, m) (A, AA,
 * and the Gram form's Q and a product), with m = min(rows, cols), n = max. */
static size_t work_bytes(const nb_tensor *p) {
    int64_t r, c;
    matrix_of(p, &r, &c);
    size_t m = (size_t)(r < c ? r : c), n = (size_t)(r < c ? c : r);
    return (2 * m * n + 4 * m * m) * nb_dtype_size(p->dtype);
}

static nb_optim *muon_new(nb_ctx *ctx, const nb_tensor_list *params, const bool *use_muon,
                          const nb_muon_opts *mo, const nb_adam_opts *ao) {
    if (!nb_ctx_ok(ctx) || nb_optim_check_params(ctx, "muon", params) ||
        check_muon_opts(ctx, mo) || (ao && nb_optim_check_adam_opts(ctx, "muon: adamw", ao)))
        return NULL;
    if (ao && !(ao->lr > 0)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "muon: the AdamW group's lr = %g, expected > 0 (Muon's lr "
                    "is kept in proportion to it)", ao->lr);
        return NULL;
    }
    size_t work = 1;
    for (int i = 0; i < params->n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        char ib[16];
        const char *pn = nb_optim_param_name(params, i, ib, sizeof ib);
        if (use_muon && !use_muon[i]) continue;
        if (t->ndim < 2) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE, "muon: parameter %d ('%s') has %d dim%s; Muon needs "
                        "matrices (give it to AdamW)", i, pn, t->ndim, t->ndim == 1 ? "" : "s");
            return NULL;
        }
        if (t->numel == 0) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE, "muon: parameter %d ('%s') has no elements", i, pn);
            return NULL;
        }
        size_t b = work_bytes(t);
        if (b > work) work = b;
    }
    nb_optim *o = nb_optim_new_kind(ctx, OPT_MUON, params, ao ? 2 : 1);
    if (!o) return NULL;
    o->muon = *mo;
    o->ns_work = malloc(work);
    o->ns_bytes = (work + 63) / 64 * 64;
    o->ns_parts = 1;
    bool ok = o->ns_work != NULL;
    if (ok && ao) {
        o->adam = *ao;
        o->muon_per_lr = mo->lr / ao->lr;
        o->aux_adam = nb_ctx_alloc(o->ctx, (size_t)params->n * sizeof *o->aux_adam);
        ok = o->aux_adam != NULL;
        for (int i = 0; ok && i < params->n; i++) o->aux_adam[i] = !use_muon[i];
    }
    if (!ok) {
        nb_optim_free(o);
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "muon: out of memory (%zu bytes of Newton-Schulz "
                    "scratch)", work);
        return NULL;
    }
    return o;
}

nb_optim *nb_muon_new(nb_ctx *ctx, const nb_tensor_list *params, nb_muon_opts opts) {
    return muon_new(ctx, params, NULL, &opts, NULL);
}

nb_optim *nb_muon_adamw_new(nb_ctx *ctx, const nb_tensor_list *params, const bool *use_muon,
                            nb_muon_opts muon, nb_adam_opts adam) {
    if (nb_ctx_ok(ctx) && !use_muon) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "muon: use_muon is NULL");
        return NULL;
    }
    return muon_new(ctx, params, use_muon, &muon, &adam);
}

/* ---- the update --------------------------------------------------------------- */
/* One parameter's pass over elements [lo, hi), on any thread. */
typedef struct muon_job {
    const nb_muon_opts *mo;
    nb_tensor *param, *buf;
    void *x;             /* the update in the parameter's layout (rows, cols) */
    double scale;        /* max(1, rows / cols)^0.5 */
} muon_job;

/* buf = buf * mu + (1 - mu) * g; x = nesterov ? g + mu * (buf - g) : buf */
NB_HOT static void momentum_range(void *arg, int64_t lo, int64_t hi) {
    const muon_job *j = arg;
    const bool nesterov = j->mo->nesterov;
#define K(T)                                                                  \
    {                                                                         \
        const T *g = j->param->grad;                                          \
        T *buf = j->buf->data, *x = j->x;                                     \
        const T mu = (T)j->mo->momentum, one_mu = (T)(1.0 - j->mo->momentum); \
        for (int64_t i = lo; i < hi; i++) {                                   \
            buf[i] = buf[i] * mu + one_mu * g[i];                             \
            x[i] = nesterov ? g[i] + mu * (buf[i] - g[i]) : buf[i];           \
        }                                                                     \
    }
    NB_DISPATCH(j->param->dtype, K);
#undef K
}

/* p = p * (1 - lr * wd); p = p + (-lr) * (x * scale) */
NB_HOT static void apply_range(void *arg, int64_t lo, int64_t hi) {
    const muon_job *j = arg;
    const bool decay = j->mo->weight_decay != 0;
#define K(T)                                                                           \
    {                                                                                  \
        T *p = j->param->data;                                                         \
        const T *x = j->x;                                                             \
        const T shrink = (T)(1.0 - j->mo->lr * j->mo->weight_decay);                   \
        const T neg_lr = (T)(-j->mo->lr), s = (T)j->scale;                             \
        for (int64_t i = lo; i < hi; i++) {                                            \
            if (decay) p[i] = p[i] * shrink;                                           \
            p[i] = p[i] + neg_lr * (x[i] * s);                                         \
        }                                                                              \
    }
    NB_DISPATCH(j->param->dtype, K);
#undef K
}

/* The tiles of gemm_sym's mirror (its bands are multiples of 16 rows). */
#define TR_TILE 16

/* c (rows, cols) = a @ b with strides as nb_gemm_float's, on every thread. */
typedef struct dgemm_job {
    double *c;
    const double *a, *b;
    int64_t ars, acs, brs, bcs, inner, cols;
} dgemm_job;

static void dgemm_range(void *arg, int64_t lo, int64_t hi) {
    const dgemm_job *j = arg;
    nb_gemm_double_ldc(j->c + lo * j->cols, j->cols, j->a + lo * j->ars, j->ars, j->acs, j->b,
                       j->brs, j->bcs, hi - lo, j->inner, j->cols, false);
}

/* `serial`: on the calling thread alone (the same bits). */
static void gemm_par(bool serial, nb_dtype dt, void *c, const void *a, int64_t ars, int64_t acs,
                     const void *b, int64_t brs, int64_t bcs, int64_t rows, int64_t inner,
                     int64_t cols) {
    if (serial && dt == NB_F32) {
        nb_gemm_float(c, a, ars, acs, b, brs, bcs, rows, inner, cols, false);
        return;
    }
    if (serial) {
        nb_gemm_double(c, a, ars, acs, b, brs, bcs, rows, inner, cols, false);
        return;
    }
    if (dt == NB_F32) {
        nb_gemm_float_par(c, NULL, a, ars, acs, b, brs, bcs, rows, inner, cols, false);
        return;
    }
    dgemm_job j = {c, a, b, ars, acs, brs, bcs, inner, cols};
    int64_t per_row = inner * cols > 0 ? inner * cols : 1;
    nb_parallel_for(rows, 65536 / per_row + 1, dgemm_range, &j);
}

/* The symmetric c (m, m) = a @ b, where a's rows and b's columns make it
 * symmetric (X Xt, A A): only the blocks on and right of the diagonal are
 * multiplied, in row bands (a band's share of the work falls with its
 * index, so the bands are taken from both ends in turn to even out the
 * threads' shares), then mirrored below. An element is computed as the
 * whole product computes it, and its mirror is the same sum of the same
 * products, so the result has the full product's bits. Each band packs its
 * part of b again, so a band of r rows multiplies r times what it packs:
 * 32 rows keep the saving near half for the small matrices; from m = 512 on
 * the packing costs more than the extra blocks: 128 rows took 9% off
 * Muon's update of GPT-2 124M's 48 matrices (m = 768; 4.39 -> 4.01 s, the
 * fastest of three, 2 threads, 2026-12-02, the Intel Xeon of
 * docs/speedrun.md). */
static int64_t sym_band(int64_t m) { return m >= 512 ? 128 : 32; }

typedef struct sym_job {
    nb_dtype dt;
    void *c;
    const void *a, *b;
    int64_t ars, acs, brs, bcs, m, inner, band, bands;
} sym_job;

static void sym_range(void *arg, int64_t lo, int64_t hi) {
    const sym_job *j = arg;
    for (int64_t r = lo; r < hi; r++) {
        int64_t band = r % 2 ? j->bands - 1 - r / 2 : r / 2;
        int64_t r0 = band * j->band, rows = j->m - r0 < j->band ? j->m - r0 : j->band;
        if (j->dt == NB_F32)
            nb_gemm_float_ldc((float *)j->c + r0 * j->m + r0, j->m, (const float *)j->a + r0 * j->ars,
                              j->ars, j->acs, (const float *)j->b + r0 * j->bcs, j->brs, j->bcs,
                              rows, j->inner, j->m - r0, false);
        else
            nb_gemm_double_ldc((double *)j->c + r0 * j->m + r0, j->m,
                               (const double *)j->a + r0 * j->ars, j->ars, j->acs,
                               (const double *)j->b + r0 * j->bcs, j->brs, j->bcs, rows, j->inner,
                               j->m - r0, false);
    }
}

static void gemm_sym(bool serial, nb_dtype dt, void *c, const void *a, int64_t ars, int64_t acs,
                     const void *b, int64_t brs, int64_t bcs, int64_t m, int64_t inner) {
    const int64_t bh = sym_band(m);
    sym_job j = {dt, c, a, b, ars, acs, brs, bcs, m, inner, bh, (m + bh - 1) / bh};
    if (serial)
        sym_range(&j, 0, j.bands);
    else
        nb_parallel_for(j.bands, j.bands * bh * m * inner > 131072 ? 1 : j.bands,
                        sym_range, &j);
    /* the mirror, in 16 x 16 tiles (bh is a multiple of 16, so a tile's
     * rows share a band): each source row's run is read whole */
#define K(T)                                                                   \
    {                                                                          \
        T *C = c;                                                              \
        for (int64_t r0 = bh; r0 < m; r0 += TR_TILE)                           \
            for (int64_t q0 = 0; q0 < r0 / bh * bh; q0 += TR_TILE)             \
                for (int64_t q = q0; q < q0 + TR_TILE; q++)                    \
                    for (int64_t r = r0; r < m && r < r0 + TR_TILE; r++)       \
                        C[r * m + q] = C[q * m + r];                           \
    }
    NB_DISPATCH(dt, K);
#undef K
}

/* y[i] = alpha * y[i] + beta * z[i] over [lo, hi) (the iteration's two
 * elementwise steps: B = b A + c AA, X = a X + BX). */
typedef struct axpby_job {
    nb_dtype dt;
    void *y;
    const void *z;
    double alpha, beta;
} axpby_job;

NB_HOT static void axpby_range(void *arg, int64_t lo, int64_t hi) {
    const axpby_job *j = arg;
#define K(T)                                                  \
    {                                                         \
        T *y = j->y;                                          \
        const T *z = j->z;                                    \
        const T al = (T)j->alpha, be = (T)j->beta;            \
        for (int64_t i = lo; i < hi; i++) y[i] = al * y[i] + be * z[i]; \
    }
    NB_DISPATCH(j->dt, K);
#undef K
}

static void axpby(bool serial, nb_dtype dt, void *y, double alpha, const void *z, double beta,
                  int64_t n) {
    axpby_job j = {dt, y, z, alpha, beta};
    if (serial) axpby_range(&j, 0, n);
    else nb_parallel_for(n, MUON_GRAIN, axpby_range, &j);
}

/* x (m, n) = x / (||x||_F + 1e-7). The squares are summed in double (four
 * partial sums), rounded to T, as the divisor is. */
NB_HOT static void ns_normalize(nb_dtype dt, void *x, int64_t mn) {
#define K(T)                                                                  \
    {                                                                         \
        T *X = x;                                                             \
        double s[4] = {0, 0, 0, 0};                                           \
        int64_t i = 0;                                                        \
        for (; i + 4 <= mn; i += 4)                                           \
            for (int k = 0; k < 4; k++) s[k] += (double)X[i + k] * X[i + k];  \
        for (; i < mn; i++) s[0] += (double)X[i] * X[i];                      \
        const T d = (T)sqrt((s[0] + s[1]) + (s[2] + s[3])) + (T)NS_EPS;       \
        for (i = 0; i < mn; i++) X[i] = X[i] / d;                             \
    }
    NB_DISPATCH(dt, K);
#undef K
}

/* d (m, m) += alpha I */
static void add_diag(nb_dtype dt, void *d, double alpha, int64_t m) {
#define K(T)                                                   \
    {                                                          \
        T *D = d;                                              \
        for (int64_t i = 0; i < m; i++) D[i * m + i] += (T)alpha; \
    }
    NB_DISPATCH(dt, K);
#undef K
}

/* `steps` quintic steps on the Gram matrix, for wide x (m < n): every X_k
 * is Q_k X_0 with Q_k a polynomial in A_0 = X_0 X_0t, so the steps need
 * only (m, m) products: P = a I + b A + c A A; Q = P Q; A = P A P (the next
 * X Xt); then X = Q X_0 once. That is 1.5 m^2 n + (4 steps - 3) m^3 / 2
 * multiply-adds, against steps (1.5 m^2 n + m^3 / 2) for the plain form:
 * fewer whenever n > m and steps > 1. The result is the plain form's but
 * for rounding: the factors commute, so each product is symmetric and
 * computed as one. Q's norm grows about 3.4 times a step (the quintic's
 * slope at 0), and X_0's rounding with it, so runs of at most GRAM_RUN
 * steps keep float32 within the plain form's tolerance of PyTorch.
 * s holds four (m, m) matrices; the result lands in out (m, n). */
#define GRAM_RUN 3

static void newton_schulz_gram(bool serial, nb_dtype dt, const void *x, void *out, char *s,
                               int64_t m, int64_t n, int steps) {
    const size_t mm = (size_t)(m * m) * nb_dtype_size(dt);
    void *a = s, *p = s + mm, *q = s + 2 * mm, *t = s + 3 * mm, *sw;
    gemm_sym(serial, dt, a, x, n, 1, x, 1, n, m, n);          /* A = X Xt */
    for (int k = 0; k < steps; k++) {
        gemm_sym(serial, dt, p, a, m, 1, a, m, 1, m, m);      /* P = A A */
        axpby(serial, dt, p, NS_C, a, NS_B, m * m);           /* P = c AA + b A */
        add_diag(dt, p, NS_A, m);                             /* P += a I */
        if (k + 1 < steps) {
            gemm_sym(serial, dt, t, p, m, 1, a, m, 1, m, m);  /* T = P A */
            gemm_sym(serial, dt, a, p, m, 1, t, m, 1, m, m);  /* A = P T */
        }
        if (k) {
            gemm_sym(serial, dt, t, p, m, 1, q, m, 1, m, m);  /* T = P Q */
            sw = q, q = t, t = sw;
        } else {
            sw = q, q = p, p = sw;                            /* Q = P */
        }
    }
    gemm_par(serial, dt, out, q, m, 1, x, n, 1, m, m, n);     /* X = Q X_0 */
}

/* x (m, n), m <= n: normalized, then `steps` quintic iterations, with bx (m,
 * n) and s (four (m, m)) as scratch. Returns where the result is (x or bx). */
static void *newton_schulz(bool serial, nb_dtype dt, void *x, void *bx, char *s, int64_t m,
                           int64_t n, int steps) {
    const int64_t mn = m * n;
    ns_normalize(dt, x, mn);
    if (n > m && steps > 1) { /* runs of GRAM_RUN steps, none of 1 */
        for (int left = steps, k; left > 0; left -= k) {
            k = left == GRAM_RUN + 1 ? 2 : left > GRAM_RUN ? GRAM_RUN : left;
            newton_schulz_gram(serial, dt, x, bx, s, m, n, k);
            void *sw = x;
            x = bx, bx = sw;
        }
        return x;
    }
    void *a = s, *aa = s + (size_t)(m * m) * nb_dtype_size(dt);
    for (int k = 0; k < steps; k++) {
        gemm_sym(serial, dt, a, x, n, 1, x, 1, n, m, n);      /* A = X Xt */
        gemm_sym(serial, dt, aa, a, m, 1, a, m, 1, m, m);     /* AA = A A */
        axpby(serial, dt, a, NS_B, aa, NS_C, m * m);          /* B = b A + c AA, in a */
        gemm_par(serial, dt, bx, a, m, 1, x, n, 1, m, m, n);  /* BX = B X */
        axpby(serial, dt, x, NS_A, bx, 1.0, mn);              /* X = a X + BX */
    }
    return x;
}

/* Parameter i's update with `work` as its scratch, on every thread or
 * (serial) on the calling one. */
static void muon_one(nb_optim *o, int i, char *work, bool serial) {
    nb_tensor *p = nb_list_tensor(&o->params, i);
    param_state *ps = &o->st[i];
    const size_t es = nb_dtype_size(p->dtype);
    int64_t rows, cols;
    matrix_of(p, &rows, &cols);
    const bool tr = rows > cols;
    const int64_t m = tr ? cols : rows, n = tr ? rows : cols;
    char *x = work, *bx = x + (size_t)(m * n) * es, *s = bx + (size_t)(m * n) * es;
    nb_muon_opts mo = o->muon; /* with this parameter's lr */
    mo.lr *= nb_optim_lr_scale(o, i);
    /* a tall parameter's update is made in bx, then turned into x; its
     * result is turned back into the other buffer before the update */
    muon_job j = {&mo, p, ps->momentum_buffer, tr ? bx : x,
                  sqrt(rows > cols ? (double)rows / (double)cols : 1.0)};
    if (serial) momentum_range(&j, 0, (int64_t)p->numel);
    else nb_parallel_for((int64_t)p->numel, MUON_GRAIN, momentum_range, &j);
    if (tr) nb_transpose_dt(p->dtype, x, bx, (size_t)cols, (size_t)rows, (size_t)cols);
    void *u = newton_schulz(serial, p->dtype, x, bx, s, m, n, o->muon.ns_steps);
    if (tr) {
        void *back = u == x ? bx : x;
        nb_transpose_dt(p->dtype, back, u, (size_t)n, (size_t)m, (size_t)n);
        u = back;
    }
    j.x = u;
    if (serial) apply_range(&j, 0, (int64_t)p->numel);
    else nb_parallel_for((int64_t)p->numel, MUON_GRAIN, apply_range, &j);
}

/* The multiply-adds of one parameter's Newton-Schulz iterations, as
 * newton_schulz does them (for sharing parameters out over the threads). */
static double ns_cost(const nb_tensor *p, int steps) {
    int64_t r, c;
    matrix_of(p, &r, &c);
    double m = (double)(r < c ? r : c), n = (double)(r < c ? c : r);
    if (n > m && steps > 1) { /* runs of GRAM_RUN steps or fewer */
        double runs = (steps + GRAM_RUN - 1) / GRAM_RUN;
        return runs * 1.5 * m * m * n + (4.0 * steps - 3 * runs) * m * m * m / 2;
    }
    return steps * (1.5 * m * m * n + m * m * m / 2);
}

/* Whole parameters shared out: part k of the pool updates the parameters
 * assigned to it, each on its own thread with scratch slot k. */
typedef struct many_job {
    nb_optim *o;
    const int *idx, *part; /* n parameters and the part each goes to */
    int n;
} many_job;

static void many_range(void *arg, int64_t lo, int64_t hi) {
    const many_job *j = arg;
    for (int64_t k = lo; k < hi; k++)
        for (int q = 0; q < j->n; q++)
            if (j->part[q] == k)
                muon_one(j->o, j->idx[q], (char *)j->o->ns_work + (size_t)k * j->o->ns_bytes, true);
}

void nb_muon_update(nb_optim *o, const int *idx, int n) {
    for (int q = 0; q < n; q++) {
        const nb_tensor *p = nb_list_tensor(&o->params, idx[q]);
        if (o->st[idx[q]].live) continue;
        memset(o->st[idx[q]].momentum_buffer->data, 0, p->numel * nb_dtype_size(p->dtype));
    }
    /* Many small matrices (a GPT's blocks) go faster one a thread than each
     * split over the threads; a few large ones, the other way. Each
     * parameter's arithmetic is the same either way. */
    int parts = nb_parallel_parts();
    int *part = parts > 1 && n >= 2 * parts ? malloc((size_t)n * sizeof *part) : NULL;
    if (part && o->ns_parts < parts) {
        void *w = realloc(o->ns_work, (size_t)parts * o->ns_bytes);
        if (w) o->ns_work = w, o->ns_parts = parts;
    }
    if (!part || o->ns_parts < parts) {
        free(part);
        for (int q = 0; q < n; q++) muon_one(o, idx[q], o->ns_work, false);
        return;
    }
    /* the costliest first, each to the part with the least so far */
    double load[64] = {0};
    const int steps = o->muon.ns_steps;
    if (parts > 64) parts = 64;
    bool *done = calloc((size_t)n, sizeof *done);
    for (int r = 0; done && r < n; r++) {
        int best = -1;
        for (int q = 0; q < n; q++)
            if (!done[q] && (best < 0 || ns_cost(nb_list_tensor(&o->params, idx[q]), steps) >
                                             ns_cost(nb_list_tensor(&o->params, idx[best]), steps)))
                best = q;
        int k = 0;
        for (int t = 1; t < parts; t++)
            if (load[t] < load[k]) k = t;
        part[best] = k, done[best] = true;
        load[k] += ns_cost(nb_list_tensor(&o->params, idx[best]), steps);
    }
    if (!done) {
        free(part);
        for (int q = 0; q < n; q++) muon_one(o, idx[q], o->ns_work, false);
        return;
    }
    free(done);
    many_job j = {o, idx, part, n};
    nb_parallel_for(parts, 1, many_range, &j);
    free(part);
}
