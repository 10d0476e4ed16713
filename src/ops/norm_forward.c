/* ops/norm_forward.c - the forward-mode rules of layer_norm and rms_norm:
 * their recorded ops (for tangents to be differentiated again) and a
 * one-pass kernel over each row (when nothing records the tangent). */
#include "ops/ops_internal.h"

enum { TAN_GRAIN = 4096 }; /* elements worth a thread, as the norms' own */

/* ---- forward-mode rules, with recorded ops ------------------------------------
 * With x̂ the normalised x and r = 1/√(var + ε) (layer_norm, x̂ = (x - mean x) r)
 * or 1/√(mean(x²) + ε) (rms_norm, x̂ = x r), and u the tangent of x less its
 * mean (layer_norm) or itself (rms_norm): dx̂ = r (u - x̂ · mean(x̂ · u)) along
 * the last dim, and tout = dx̂ γ + x̂ tγ + tβ. Cheaper than pushing the
 * tangents through the composed form, which nb_hvp's forward-over-reverse
 * meets often. */
static nb_tensor *norm_tangent(nb_ctx *ctx, nb_node *n, nb_tensor *xh, nb_tensor *r,
                               nb_tensor *u, nb_tensor *w, nb_tensor *tw, nb_tensor *tb) {
    nb_tensor *t = NULL;
    if (u) {
        nb_tensor *m = nb_mean_dim(ctx, nb_mul(ctx, xh, u), -1, true);
        t = nb_mul(ctx, r, nb_sub(ctx, u, nb_mul(ctx, xh, m)));
        if (w) t = nb_mul(ctx, t, w);
    }
    if (tw) t = nb_fwd_sum(ctx, n->out, t, nb_mul(ctx, xh, tw), 1);
    if (tb) t = nb_fwd_sum(ctx, n->out, t, tb, 1);
    return t;
}

/* The same tangent in one pass over each row, for when nothing records it
 * (a plain JVP): x (R, D) with its tangent tx, gain w and its tangent tw,
 * bias tangent tb (each NULL when absent), centre for layer_norm. The
 * statistics are taken in double, as the forward's are. */
typedef struct norm_tan_job {
    const nb_tensor *x, *tx, *w, *tw, *tb;
    nb_tensor *t;
    double eps;
    size_t D;
    bool centre;
} norm_tan_job;

#define NORM_TAN_ROWS(T)                                                                \
    {                                                                                   \
        const size_t D = j->D;                                                          \
        const T *w = j->w ? j->w->data : NULL, *tw = j->tw ? j->tw->data : NULL;        \
        const T *tb = j->tb ? j->tb->data : NULL;                                       \
        for (int64_t r = lo; r < hi; r++) {                                             \
            const T *x = (const T *)j->x->data + (size_t)r * D;                         \
            const T *tx = j->tx ? (const T *)j->tx->data + (size_t)r * D : NULL;        \
            T *t = (T *)j->t->data + (size_t)r * D;                                     \
            double mean = 0, tmean = 0, var = 0, m = 0;                                 \
            if (j->centre) {                                                            \
                for (size_t i = 0; i < D; i++) mean += (double)x[i];                    \
                mean /= (double)D;                                                      \
                for (size_t i = 0; tx && i < D; i++) tmean += (double)tx[i];            \
                tmean /= (double)D;                                                     \
            }                                                                           \
            for (size_t i = 0; i < D; i++) var += ((double)x[i] - mean) * ((double)x[i] - mean); \
            const double rs = 1.0 / sqrt(var / (double)D + j->eps);                     \
            for (size_t i = 0; tx && i < D; i++)                                        \
                m += ((double)x[i] - mean) * rs * ((double)tx[i] - tmean);              \
            m /= (double)D;                                                             \
            for (size_t i = 0; i < D; i++) {                                            \
                const double xh = ((double)x[i] - mean) * rs;                           \
                double v = tx ? rs * (((double)tx[i] - tmean) - xh * m) : 0.0;          \
                if (w) v *= (double)w[i];                                               \
                if (tw) v += xh * (double)tw[i];                                        \
                if (tb) v += (double)tb[i];                                             \
                t[i] = (T)v;                                                            \
            }                                                                           \
        }                                                                               \
    }

static void norm_tan_rows(void *arg, int64_t lo, int64_t hi) {
    const norm_tan_job *j = arg;
    NB_DISPATCH(j->t->dtype, NORM_TAN_ROWS);
}
#undef NORM_TAN_ROWS

static nb_tensor *norm_tangent_fused(nb_ctx *ctx, nb_node *n, nb_tensor *tx, nb_tensor *w,
                                     nb_tensor *tw, nb_tensor *tb, bool centre) {
    nb_tensor *x = n->in[0];
    if (!tx && !tw && !tb) return NULL;
    nb_tensor *t = nb_empty(ctx, x->dtype, x->ndim, x->shape); /* every row is written */
    if (!t) return NULL;
    size_t D = (size_t)x->shape[x->ndim - 1];
    norm_tan_job j = {x, tx, w, tw, tb, t, n->f[0], D, centre};
    nb_parallel_for((int64_t)(x->numel / D), 1 + TAN_GRAIN / (int64_t)D, norm_tan_rows, &j);
    return t;
}

nb_tensor *nb_forward_layer_norm(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor *x = n->in[0];
    int iw = n->i[0] ? 1 : -1, ib = n->i[1] ? (n->i[0] ? 2 : 1) : -1;
    if (nb_fwd_unrecorded(ctx, n, tin) && x->numel > 0)
        return norm_tangent_fused(ctx, n, tin[0], iw > 0 ? n->in[iw] : NULL,
                                  iw > 0 ? tin[iw] : NULL, ib > 0 ? tin[ib] : NULL, true);
    nb_tensor *xc = nb_sub(ctx, x, nb_mean_dim(ctx, x, -1, true));
    nb_tensor *var = nb_mean_dim(ctx, nb_mul(ctx, xc, xc), -1, true);
    nb_tensor *r = nb_pow(ctx, nb_add_scalar(ctx, var, n->f[0]), -0.5);
    nb_tensor *u = tin[0] ? nb_sub(ctx, tin[0], nb_mean_dim(ctx, tin[0], -1, true)) : NULL;
    return norm_tangent(ctx, n, nb_mul(ctx, xc, r), r, u, iw > 0 ? n->in[iw] : NULL,
                        iw > 0 ? tin[iw] : NULL, ib > 0 ? tin[ib] : NULL);
}

nb_tensor *nb_forward_rms_norm(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor *x = n->in[0], *w = n->i[0] ? n->in[1] : NULL;
    if (nb_fwd_unrecorded(ctx, n, tin) && x->numel > 0)
        return norm_tangent_fused(ctx, n, tin[0], w, w ? tin[1] : NULL, NULL, false);
    nb_tensor *ms = nb_mean_dim(ctx, nb_mul(ctx, x, x), -1, true);
    nb_tensor *r = nb_pow(ctx, nb_add_scalar(ctx, ms, n->f[0]), -0.5);
    return norm_tangent(ctx, n, nb_mul(ctx, x, r), r, tin[0], w, w ? tin[1] : NULL, NULL);
}
