/* ops/sdpa_forward.c - sdpa's forward-mode rule in one pass over each head,
 * for when nothing records the tangent (a plain JVP, nb_hvp's push).
 *
 * q (B, Tq, H, hd), k (B, Tk, Hkv, hd), v (B, Tk, Hkv, hdv), out (B, Tq,
 * H * hdv); head h reads key/value head h / (H / Hkv). With s the scale,
 * P = softmax(s Q Kᵀ) over the keys each query sees (causal: j <= i; a
 * window w: also j > i - w), the tangents tq, tk, tv give
 *
 *   dS = s (tQ Kᵀ + Q tKᵀ)              (Tq, Tk)
 *   dP = P ⊙ (dS - rowsum(P ⊙ dS))       the softmax's Jacobian on dS
 *   tout = dP V + P tV                   (Tq, hdv)
 *
 * the same products the composed form's rule takes, without its recorded
 * ops, its permuted copies and the (B, H, Tq, Tk) tensors between them: two
 * (Tq, Tk) buffers per head. A key padding mask or dropout takes the
 * composed form (nb_forward_sdpa decides). */
#include <math.h>
#include <string.h>

#include "ops/ops_internal.h"

typedef struct sdpa_tan_job {
    const void *q, *k, *v, *tq, *tk, *tv; /* tq, tk, tv NULL when zero */
    void *t, *scratch;                    /* t: (B, Tq, H * hdv); scratch: 2 Tq Tk per head */
    int64_t B, Tq, Tk, H, Hkv, hd, hdv, window;
    double scale;
    bool causal, f32;
} sdpa_tan_job;

/* Keys row i sees: [lo, hi). */
static void sdpa_tan_span(const sdpa_tan_job *j, int64_t i, int64_t *lo, int64_t *hi) {
    *hi = j->causal && i + 1 < j->Tk ? i + 1 : j->Tk;
    *lo = j->window > 0 && i - j->window + 1 > 0 ? i - j->window + 1 : 0;
    if (*lo > *hi) *lo = *hi;
}

/* One head (task index bh = b * H + h): S and dS into the head's scratch,
 * the softmax and its Jacobian per row in double, then the two products
 * into t. GEMM is nb_gemm_float_ldc or nb_gemm_double_ldc. */
#define SDPA_TAN_HEAD(T, GEMM)                                                              \
    {                                                                                       \
        const int64_t b = bh / j->H, h = bh % j->H, g = h / (j->H / j->Hkv);                \
        const int64_t Tq = j->Tq, Tk = j->Tk, hd = j->hd, hdv = j->hdv;                     \
        const int64_t qrs = j->H * hd, krs = j->Hkv * hd, vrs = j->Hkv * hdv;                \
        const size_t qo = (size_t)((b * Tq * j->H + h) * hd);                               \
        const size_t ko = (size_t)((b * Tk * j->Hkv + g) * hd);                             \
        const size_t vo = (size_t)((b * Tk * j->Hkv + g) * hdv);                            \
        T *S = (T *)j->scratch + (size_t)(2 * bh * Tq * Tk), *dS = S + Tq * Tk;             \
        const T *q = (const T *)j->q + qo, *k = (const T *)j->k + ko;                       \
        const T *v = (const T *)j->v + vo;                                                  \
        T *out = (T *)j->t + (size_t)((b * Tq * j->H + h) * hdv);                           \
        GEMM(S, Tk, q, qrs, 1, k, 1, krs, Tq, hd, Tk, false);                               \
        bool any = j->tq || j->tk;                                                          \
        if (j->tq)                                                                          \
            GEMM(dS, Tk, (const T *)j->tq + qo, qrs, 1, k, 1, krs, Tq, hd, Tk, false);      \
        if (j->tk)                                                                          \
            GEMM(dS, Tk, q, qrs, 1, (const T *)j->tk + ko, 1, krs, Tq, hd, Tk,              \
                 j->tq != NULL);                                                            \
        for (int64_t i = 0; i < Tq; i++) {                                                  \
            T *s = S + i * Tk, *ds = dS + i * Tk;                                           \
            int64_t lo, hi;                                                                 \
            sdpa_tan_span(j, i, &lo, &hi);                                                  \
            double mx = -INFINITY, sum = 0, dot = 0;                                        \
            for (int64_t c = lo; c < hi; c++) mx = fmax(mx, j->scale * (double)s[c]);       \
            for (int64_t c = lo; c < hi; c++) {                                             \
                double e = exp(j->scale * (double)s[c] - mx);                               \
                s[c] = (T)e, sum += e;                                                      \
            }                                                                               \
            for (int64_t c = 0; c < Tk; c++) {                                              \
                double p = c >= lo && c < hi && sum > 0 ? (double)s[c] / sum : 0;           \
                s[c] = (T)p;                                                                \
                if (any) dot += p * j->scale * (double)ds[c];                               \
            }                                                                               \
            for (int64_t c = 0; any && c < Tk; c++)                                         \
                ds[c] = (T)((double)s[c] * (j->scale * (double)ds[c] - dot));               \
        }                                                                                   \
        /* tout (Tq, hdv), rows H hdv apart, = dP V + P tV */                               \
        if (any) GEMM(out, j->H * hdv, dS, Tk, 1, v, vrs, 1, Tq, Tk, hdv, false);             \
        if (j->tv)                                                                          \
            GEMM(out, j->H * hdv, S, Tk, 1, (const T *)j->tv + vo, vrs, 1, Tq, Tk, hdv, any); \
        if (!any && !j->tv)                                                                 \
            for (int64_t i = 0; i < Tq; i++) memset(out + i * j->H * hdv, 0, hdv * sizeof(T)); \
    }

static void sdpa_tan_heads(void *arg, int64_t lo, int64_t hi) {
    const sdpa_tan_job *j = arg;
    for (int64_t bh = lo; bh < hi; bh++) {
        if (j->f32)
            SDPA_TAN_HEAD(float, nb_gemm_float_ldc)
        else
            SDPA_TAN_HEAD(double, nb_gemm_double_ldc)
    }
}

/* The tangent of node n (an sdpa without key padding mask or dropout) from
 * its inputs' tangents, or NULL (zero, or out of memory on ctx). */
nb_tensor *nb_sdpa_tangent_fused(nb_ctx *ctx, const nb_node *n, nb_tensor *const *tin) {
    if (!tin[0] && !tin[1] && !tin[2]) return NULL;
    const nb_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    sdpa_tan_job j = {q->data, k->data, v->data, tin[0] ? tin[0]->data : NULL,
                      tin[1] ? tin[1]->data : NULL, tin[2] ? tin[2]->data : NULL, NULL, NULL,
                      q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2],
                      q->shape[3], v->shape[3], n->i[2], n->f[0], n->i[0] != 0,
                      q->dtype == NB_F32};
    nb_tensor *t = nb_empty(ctx, q->dtype, n->out->ndim, n->out->shape); /* all written */
    size_t es = nb_dtype_size(q->dtype);
    size_t bytes = (size_t)(2 * j.B * j.H * j.Tq * j.Tk) * es;
    j.scratch = t ? nb_ctx_scratch(ctx, bytes) : NULL;
    if (!j.scratch) return NULL;
    j.t = t->data;
    int64_t per = j.Tq * j.Tk * (3 * j.hd + 2 * j.hdv);
    nb_parallel_for(j.B * j.H, per > 0 ? 1 + ((int64_t)1 << 18) / per : 1, sdpa_tan_heads, &j);
    nb_ctx_give_back(ctx, j.scratch, bytes);
    return t;
}
