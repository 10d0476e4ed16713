/* ops/rope.c - rope: rotary position embeddings, and the tables they read.
 *
 *   x (..., T, hd), or (..., T, H, hd) with NB_ROPE_THD; cos, sin (max_T, hd)
 *   for each row of x at position p = pos0 + t, each pair (a, b), i < h = hd / 2:
 *     out[a] = x[a] cos[p, i]     - x[b] sin[p, i]
 *     out[b] = x[b] cos[p, i + h] + x[a] sin[p, i + h]
 *   with (a, b) = (i, i + h), or (2i, 2i + 1) with NB_ROPE_INTERLEAVED
 *
 * which is x * cos + rotate_half(x) * sin, rotate_half(v) = cat(-v2, v1), in
 * PyTorch's order of roundings. The op is linear in x, and its transpose is
 * the same kernel with the tables (cos, -swap_halves(sin)):
 *     dx[a] = g[a] cos[p, i]     + g[b] sin[p, i + h]
 *     dx[b] = g[b] cos[p, i + h] - g[a] sin[p, i]
 * (with one angle per pair in the tables, the rotation by minus that angle).
 * So the forward saves the rows it read in that form, (T, hd) each; the
 * backward runs the kernel on dout into x's gradient, and the graph backward
 * is rope itself on dout with the saved tables, whose own transpose gives
 * back the forward's: every order works. Rows are split over the threads;
 * each output element is one thread's, so no bit depends on the split. */
#include "ops/ops_internal.h"

/* One kernel call: out (=, or += when add) = rope(x) with the tables' rows
 * row0 .. row0 + T - 1. The rows of x are (outer, T, H) in order, H = 1
 * without NB_ROPE_THD. */
typedef struct rope_job {
    nb_dtype dtype;
    const void *x;         /* (rows, hd) */
    void *out;             /* (rows, hd) */
    const void *cos, *sin; /* (row0 + T or more, hd) */
    int64_t row0, n_t, H, hd; /* n_t: x's T */
    bool interleaved, add;
} rope_job;

enum { ROPE_GRAIN = 8192 }; /* elements worth a thread */

/* rope_rows_<T>(j, lo, hi): rows [lo, hi) of j for element type T. The four
 * loops (pairing, store or add) are kept apart so that each is a plain loop
 * the compiler vectorises. */
#define ROPE_PAIRS(T, A, B, STORE)                                                           \
    for (int64_t i = 0; i < h; i++) {                                                     \
        T xa = xr[A], xb = xr[B];                                                         \
        STORE(yr[A], xa * c[i] - xb * s[i]);                                              \
        STORE(yr[B], xb * c[i + h] + xa * s[i + h]);                                      \
    }
#define ROPE_SET(dst, v) (dst) = (v)
#define ROPE_ADD(dst, v) (dst) += (v)
/* Row r is head r % H at position t = (r / H) % n_t: the two divisions are
 * made once for lo, and (t, head) counted on from there (per row they cost
 * more than the row's 32 to 128 products). */
#define ROPE_ROWS(T)                                                                      \
    NB_HOT static void rope_rows_##T(const rope_job *j, int64_t lo, int64_t hi) {         \
        const int64_t hd = j->hd, h = hd / 2;                                             \
        const T *xs = j->x, *cs = j->cos, *ss = j->sin;                                   \
        T *ys = j->out;                                                                   \
        int64_t head = lo % j->H, t = (lo / j->H) % j->n_t;                               \
        for (int64_t r = lo; r < hi; r++) {                                               \
            int64_t p = j->row0 + t;                                                      \
            if (++head == j->H) head = 0, t = t + 1 == j->n_t ? 0 : t + 1;                \
            const T *xr = xs + r * hd, *c = cs + p * hd, *s = ss + p * hd;                \
            T *yr = ys + r * hd;                                                          \
            if (!j->interleaved && !j->add)                                               \
                ROPE_PAIRS(T, i, i + h, ROPE_SET)                                            \
            else if (!j->interleaved)                                                     \
                ROPE_PAIRS(T, i, i + h, ROPE_ADD)                                            \
            else if (!j->add)                                                             \
                ROPE_PAIRS(T, 2 * i, 2 * i + 1, ROPE_SET)                                    \
            else                                                                          \
                ROPE_PAIRS(T, 2 * i, 2 * i + 1, ROPE_ADD)                                    \
        }                                                                                 \
    }
ROPE_ROWS(float)
ROPE_ROWS(double)

static void rope_range(void *arg, int64_t lo, int64_t hi) {
    const rope_job *j = arg;
    if (j->dtype == NB_F32)
        rope_rows_float(j, lo, hi);
    else
        rope_rows_double(j, lo, hi);
}

/* x's T and H (1 without NB_ROPE_THD) for the layout flags say. */
static void rope_dims(const nb_tensor *x, unsigned flags, int64_t *T, int64_t *H) {
    bool thd = (flags & NB_ROPE_THD) != 0;
    *T = x->shape[x->ndim - (thd ? 3 : 2)];
    *H = thd ? x->shape[x->ndim - 2] : 1;
}

/* out (=, or += when add) = rope of x (x's shape, data of x's dtype) with
 * the tables' rows row0 on. */
static void rope_apply(const nb_tensor *x, const void *xdata, void *out, const nb_tensor *cos,
                       const nb_tensor *sin, int64_t row0, unsigned flags, bool add) {
    int64_t T, H, hd = x->shape[x->ndim - 1];
    if (x->numel == 0) return;
    rope_dims(x, flags, &T, &H);
    rope_job j = {x->dtype, xdata, out, cos->data, sin->data, row0, T, H, hd,
                  (flags & NB_ROPE_INTERLEAVED) != 0, add};
    nb_parallel_for((int64_t)x->numel / hd, 1 + ROPE_GRAIN / hd, rope_range, &j);
}

/* ---- checks ------------------------------------------------------------------ */

/* The shape rules of nb_rope (the inputs are present, floating, of one
 * dtype); false with the error recorded. */
static bool rope_check(nb_ctx *ctx, const char *op, const nb_tensor *x, const nb_tensor *cos,
                       const nb_tensor *sin, int64_t pos0, unsigned flags) {
    char sx[64], st[64];
    if (flags & ~(unsigned)(NB_ROPE_INTERLEAVED | NB_ROPE_THD)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE,
                    "%s: flags 0x%x has unknown bits, expected 0 or NB_ROPE_INTERLEAVED and "
                    "NB_ROPE_THD or'ed",
                    op, flags);
        return false;
    }
    bool thd = (flags & NB_ROPE_THD) != 0;
    if (x->ndim < (thd ? 3 : 2)) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has %d dims, expected %s", op,
                    nb_shape_str(x, sx, sizeof sx), x->ndim,
                    thd ? "(..., T, H, head_dim) (NB_ROPE_THD)" : "(..., T, head_dim)");
        return false;
    }
    int64_t T, H, hd = x->shape[x->ndim - 1];
    rope_dims(x, flags, &T, &H);
    if (hd % 2) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: x %s has head_dim %lld, odd: rope turns pairs of entries, so "
                    "head_dim must be even",
                    op, nb_shape_str(x, sx, sizeof sx), (long long)hd);
        return false;
    }
    const nb_tensor *tabs[2] = {cos, sin};
    static const char *const names[2] = {"cos", "sin"};
    for (int k = 0; k < 2; k++) {
        const nb_tensor *t = tabs[k];
        if (t->ndim != 2 || t->shape[1] != hd) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "%s: table %s %s does not fit x %s: expected (max_T, %lld), one row "
                        "of head_dim entries per position",
                        op, names[k], nb_shape_str(t, st, sizeof st),
                        nb_shape_str(x, sx, sizeof sx), (long long)hd);
            return false;
        }
        if (t->requires_grad) {
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: table %s %s requires grad, but the tables are constants: no "
                        "gradient reaches them (make them with nb_rope_tables)",
                        op, names[k], nb_shape_str(t, st, sizeof st));
            return false;
        }
    }
    if (cos->shape[0] != sin->shape[0]) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: tables cos %s and sin %s differ in length", op,
                    nb_shape_str(cos, st, sizeof st), nb_shape_str(sin, sx, sizeof sx));
        return false;
    }
    if (pos0 < 0) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: pos0 = %lld, expected a position >= 0", op,
                    (long long)pos0);
        return false;
    }
    int64_t max_t = cos->shape[0];
    if (pos0 > max_t - T) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: x %s has T = %lld positions from pos0 = %lld, but the tables %s hold "
                    "%lld (positions 0 .. %lld): make them for at least %lld",
                    op, nb_shape_str(x, sx, sizeof sx), (long long)T, (long long)pos0,
                    nb_shape_str(cos, st, sizeof st), (long long)max_t, (long long)max_t - 1,
                    pos0 > INT64_MAX - T ? (long long)INT64_MAX : (long long)(pos0 + T));
        return false;
    }
    return true;
}

/* ---- forward ------------------------------------------------------------------- */

static void rope_backward(nb_ctx *ctx, nb_node *n);

/* The backward's tables, (T, hd) each, into n: saved_t = cos's rows pos0
 * .. pos0 + T - 1, saved = those of sin, halves swapped and negated. */
static bool rope_save(nb_ctx *ctx, nb_node *n, const nb_tensor *cos, const nb_tensor *sin,
                      int64_t pos0, int64_t T) {
    int64_t hd = cos->shape[1], h = hd / 2;
    nb_tensor *ct = nb_empty(ctx, cos->dtype, NB_SHAPE(T, hd));
    nb_tensor *st = nb_empty(ctx, cos->dtype, NB_SHAPE(T, hd));
    if (!ct || !st) return false;
    size_t es = nb_dtype_size(cos->dtype);
    if (ct->numel) memcpy(ct->data, (const char *)cos->data + (size_t)(pos0 * hd) * es, ct->numel * es);
#define K_(T_)                                                                            \
    {                                                                                     \
        const T_ *s = (const T_ *)sin->data + pos0 * hd;                                  \
        T_ *d = st->data;                                                                 \
        for (int64_t t = 0; t < T; t++, s += hd, d += hd)                                 \
            for (int64_t i = 0; i < h; i++) {                                             \
                d[i] = -s[i + h];                                                         \
                d[i + h] = -s[i];                                                         \
            }                                                                             \
    }
    NB_DISPATCH(cos->dtype, K_);
#undef K_
    n->saved_t = ct;
    n->saved = st;
    return true;
}

nb_tensor *nb_rope(nb_ctx *ctx, nb_tensor *x, const nb_tensor *cos, const nb_tensor *sin,
                   int64_t pos0, unsigned flags) {
    const char *op = nb_op_name(NB_OP_ROPE);
    nb_tensor *all[3] = {x, (nb_tensor *)cos, (nb_tensor *)sin};
    static const char *const names[3] = {"x", "cos", "sin"};
    static const bool optional[3] = {false, false, false};
    if (!nb_check_named_inputs(ctx, op, 3, all, names, optional)) return NULL;
    if (!rope_check(ctx, op, x, cos, sin, pos0, flags)) return NULL;
    nb_tensor *out = nb_empty(ctx, x->dtype, x->ndim, x->shape); /* every element is written */
    if (!out) return NULL;
    rope_apply(x, x->data, out->data, cos, sin, pos0, flags, false);
    nb_node *n = nb_record_op(ctx, NB_OP_ROPE, out, 1, &x, rope_backward);
    if (n) {
        int64_t T, H;
        rope_dims(x, flags, &T, &H);
        n->i[0] = flags;
        n->i[1] = pos0;
        if (!rope_save(ctx, n, cos, sin, pos0, T)) return NULL;
    }
    return out;
}

/* ---- backward ------------------------------------------------------------------- */

/* dx (+)= rope(dout) with the transposed tables the forward saved. */
static void rope_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0];
    bool fresh = false;
    void *gx = nb_grad_buffer_fresh(ctx, x, &fresh);
    if (!gx) return;
    rope_apply(x, n->out->grad, gx, n->saved_t, n->saved, 0, (unsigned)n->i[0], !fresh);
}

/* The backward as a recorded op: rope of dout with the transposed tables
 * (linear in dout, the tables constant). */
void nb_graph_backward_rope(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_rope(ctx, dout, n->saved_t, n->saved, 0, (unsigned)n->i[0]);
}

/* ==========================================================================
 * rope_tables: cos and sin of p f_i for positions p < n_pos, each angle in
 * columns i and i + hd/2, computed in double and rounded once.
 * ========================================================================== */

#define ROPE_TWO_PI 6.283185307179586476925 /* 2 pi */

/* The frequencies f_i (h of them) of head_dim hd, scaled as Llama 3 does
 * when sc is not NULL. */
static void rope_freqs(double *f, int64_t hd, double theta, const nb_rope_scaling *sc) {
    for (int64_t i = 0; i < hd / 2; i++) {
        f[i] = 1.0 / pow(theta, (double)(2 * i) / (double)hd);
        if (!sc) continue;
        double wavelen = ROPE_TWO_PI / f[i], L = (double)sc->original_max_position_embeddings;
        if (wavelen > L / sc->low_freq_factor) { /* low frequencies: slowed by factor */
            f[i] = f[i] / sc->factor;
        } else if (!(wavelen < L / sc->high_freq_factor)) { /* between: blended */
            double s = (L / wavelen - sc->low_freq_factor) /
                       (sc->high_freq_factor - sc->low_freq_factor);
            f[i] = (1 - s) * f[i] / sc->factor + s * f[i];
        } /* high frequencies stay */
    }
}

typedef struct tables_job {
    const double *f;
    nb_tensor *cos, *sin;
    int64_t hd;
} tables_job;

static void tables_range(void *arg, int64_t lo, int64_t hi) {
    const tables_job *j = arg;
    int64_t hd = j->hd, h = hd / 2;
#define K_(T)                                                                             \
    {                                                                                     \
        T *c = (T *)j->cos->data + lo * hd, *s = (T *)j->sin->data + lo * hd;             \
        for (int64_t p = lo; p < hi; p++, c += hd, s += hd)                               \
            for (int64_t i = 0; i < h; i++) {                                             \
                double a = (double)p * j->f[i];                                           \
                c[i] = c[i + h] = (T)cos(a);                                              \
                s[i] = s[i + h] = (T)sin(a);                                              \
            }                                                                             \
    }
    NB_DISPATCH(j->cos->dtype, K_);
#undef K_
}

/* The arguments' ranges; NB_OK or the error recorded. */
static nb_status tables_check(nb_ctx *ctx, const char *op, int64_t hd, int64_t n_pos,
                              double theta, const nb_rope_scaling *sc, nb_dtype dtype) {
    if (hd <= 0 || hd % 2)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: head_dim = %lld, expected an even number > 0",
                           op, (long long)hd);
    if (n_pos < 0)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_pos = %lld, expected >= 0", op,
                           (long long)n_pos);
    if (n_pos > 0 && hd > (int64_t)(SIZE_MAX / sizeof(double) / 2) / n_pos)
        return nb_ctx_fail(ctx, NB_ERR_SIZE,
                           "%s: %lld positions of head_dim %lld: too many elements to hold", op,
                           (long long)n_pos, (long long)hd);
    if (!(theta >= 1) || isinf(theta)) /* below 1 the frequencies pass 1, then overflow */
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: theta = %g, expected a finite number >= 1",
                           op, theta);
    if (dtype != NB_F32 && dtype != NB_F64)
        return nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: dtype %s, expected f32 or f64", op,
                           nb_dtype_name(dtype));
    if (!sc) return NB_OK;
    if (!(sc->factor >= 1) || isinf(sc->factor))
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: scaling factor = %g, expected finite and >= 1",
                           op, sc->factor);
    if (!(sc->low_freq_factor > 0) || !(sc->high_freq_factor > sc->low_freq_factor) ||
        isinf(sc->high_freq_factor))
        return nb_ctx_fail(ctx, NB_ERR_VALUE,
                           "%s: scaling low_freq_factor = %g, high_freq_factor = %g, expected "
                           "0 < low_freq_factor < high_freq_factor, finite",
                           op, sc->low_freq_factor, sc->high_freq_factor);
    if (sc->original_max_position_embeddings <= 0)
        return nb_ctx_fail(ctx, NB_ERR_VALUE,
                           "%s: scaling original_max_position_embeddings = %lld, expected > 0",
                           op, (long long)sc->original_max_position_embeddings);
    return NB_OK;
}

nb_status nb_rope_tables(nb_ctx *ctx, int64_t head_dim, int64_t n_pos, double theta,
                         const nb_rope_scaling *scaling, nb_dtype dtype, nb_tensor **cos,
                         nb_tensor **sin) {
    static const char op[] = "rope_tables";
    if (cos) *cos = NULL;
    if (sin) *sin = NULL;
    if (!nb_ctx_ok(ctx)) return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    if (!cos || !sin) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", op, cos ? "sin" : "cos");
    nb_status st = tables_check(ctx, op, head_dim, n_pos, theta, scaling, dtype);
    if (st) return st;
    nb_tensor *c = nb_empty(ctx, dtype, NB_SHAPE(n_pos, head_dim));
    nb_tensor *s = c ? nb_empty(ctx, dtype, NB_SHAPE(n_pos, head_dim)) : NULL;
    if (!s) return nb_ctx_status(ctx);
    if (n_pos > 0) { /* then the tables' size bounds head_dim's */
        double *f = nb_ctx_alloc_raw(ctx, (size_t)head_dim / 2 * sizeof *f);
        if (!f) return nb_ctx_status(ctx);
        rope_freqs(f, head_dim, theta, scaling);
        tables_job j = {f, c, s, head_dim};
        nb_parallel_for(n_pos, 1 + 4096 / head_dim, tables_range, &j);
    }
    *cos = c;
    *sin = s;
    return NB_OK;
}

/* forward mode: rope is a rotation of x, linear in x, so the tangent is t
 * rotated by the same angles: cos and sin rows pos0 .. are the saved cos
 * (saved_t) and the saved sin with its halves swapped and negated back. */
nb_tensor *nb_forward_rope(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    const nb_tensor *st = n->saved;
    int64_t T = st->shape[0], hd = st->shape[1], h = hd / 2;
    nb_tensor *sin = nb_empty(ctx, st->dtype, NB_SHAPE(T, hd));
    if (!sin) return NULL;
    for (int64_t t = 0; t < T; t++)
        for (int64_t i = 0; i < h; i++) {
            nb_set(sin, (size_t)(t * hd + i), -nb_get(st, (size_t)(t * hd + i + h)));
            nb_set(sin, (size_t)(t * hd + i + h), -nb_get(st, (size_t)(t * hd + i)));
        }
    return nb_rope(ctx, tin[0], n->saved_t, sin, 0, (unsigned)n->i[0]);
}
