/* nn/gpt_sample.c - inference with a KV cache, and generation (nanoGPT's
 * generate: temperature, top-k, a PCG32 draw per token).
 *
 * The cache keeps, per layer, the keys and values of positions 0..len-1 as
 * (B, Hkv, block_size, hd): the n_kv_head key/value heads of grouped-query
 * attention (n_head for the GPT-2 families), keys after RoPE at their
 * positions. A new token at position t costs, per layer, its
 * q/k/v projections, one pass over t cached keys and values (O(t C)), the
 * output projection and the MLP: no recompute of earlier positions. */
#include "gpt_family.h"
#include "gpt_internal.h"

#include <stdlib.h>
#include <string.h>

struct nb_gpt_cache {
    nb_dtype dtype;
    int64_t batch, heads, hd, cap, len;
    int n_layer;
    void **k, **v; /* n_layer arrays of batch * heads * cap * hd */
};

nb_gpt_cache *nb_gpt_cache_new(nb_ctx *ctx, const nb_gpt *m, int64_t batch) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!m || !m->wte) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "gpt_cache_new: model is %s", m ? "not initialised" : "NULL");
        return NULL;
    }
    if (batch < 1 || batch > (INT64_C(1) << 20)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "gpt_cache_new: batch %lld is outside [1, 2^20]",
                    (long long)batch);
        return NULL;
    }
    nb_gpt_cache *c = calloc(1, sizeof *c);
    if (!c) goto oom;
    c->dtype = m->cfg.dtype;
    c->batch = batch;
    c->heads = nb_gpt_kv_heads(&m->cfg); /* key/value heads: n_kv_head with GQA */
    c->hd = nb_gpt_head_dim(&m->cfg);
    c->cap = m->cfg.block_size;
    c->n_layer = m->cfg.n_layer;
    c->k = calloc((size_t)c->n_layer, sizeof *c->k);
    c->v = calloc((size_t)c->n_layer, sizeof *c->v);
    if (!c->k || !c->v) goto oom;
    double bytes = (double)batch * (double)(c->heads * c->hd) * (double)c->cap *
                   (double)nb_dtype_size(c->dtype);
    if (bytes > 1e12) goto oom;
    for (int i = 0; i < c->n_layer; i++) {
        c->k[i] = malloc((size_t)bytes);
        c->v[i] = malloc((size_t)bytes);
        if (!c->k[i] || !c->v[i]) goto oom;
    }
    return c;
oom:
    nb_gpt_cache_free(c);
    nb_ctx_fail(ctx, NB_ERR_MEMORY, "gpt_cache_new: out of memory for batch %lld",
                (long long)batch);
    return NULL;
}

void nb_gpt_cache_free(nb_gpt_cache *c) {
    if (!c) return;
    for (int i = 0; i < c->n_layer; i++) {
        if (c->k) free(c->k[i]);
        if (c->v) free(c->v[i]);
    }
    free(c->k);
    free(c->v);
    free(c);
}

void nb_gpt_cache_reset(nb_gpt_cache *c) {
    if (c) c->len = 0;
}

int64_t nb_gpt_cache_len(const nb_gpt_cache *c) { return c ? c->len : 0; }

/* Appends k, v (B, n, Hkv hd) of layer i at positions len.. and writes to
 * y (B, n, H hd) the attention of q (B, n, H hd) over positions
 * j0..len+p for each new position p (j0 = 0, or the first key of the
 * sliding window): softmax(q . K_j * scale) weighted sum of V_j, per query
 * head, query head h reading key/value head h / (H / Hkv). */
static void attend(nb_gpt_cache *c, int i, const nb_tensor *q, const nb_tensor *k,
                   const nb_tensor *v, nb_tensor *y, double scale, int64_t window, double *w) {
    const int64_t B = c->batch, G = c->heads, hd = c->hd, n = q->shape[1];
    const int64_t Ckv = G * hd, Cq = q->shape[2] * (q->ndim == 4 ? q->shape[3] : 1);
    const int64_t H = Cq / hd, per = H / G;
#define K(T)                                                                          \
    {                                                                                 \
        T *kc = c->k[i], *vc = c->v[i];                                               \
        const T *qp = q->data, *kp = k->data, *vp = v->data;                          \
        T *yp = y->data;                                                              \
        for (int64_t b = 0; b < B; b++)                                               \
            for (int64_t g = 0; g < G; g++) {                                         \
                T *kh = kc + ((b * G + g) * c->cap) * hd;                             \
                T *vh = vc + ((b * G + g) * c->cap) * hd;                             \
                for (int64_t p = 0; p < n; p++) {                                     \
                    memcpy(kh + (c->len + p) * hd, kp + (b * n + p) * Ckv + g * hd,   \
                           (size_t)hd * sizeof(T));                                   \
                    memcpy(vh + (c->len + p) * hd, vp + (b * n + p) * Ckv + g * hd,   \
                           (size_t)hd * sizeof(T));                                   \
                }                                                                     \
                for (int64_t h = g * per; h < (g + 1) * per; h++)                     \
                    for (int64_t p = 0; p < n; p++) {                                 \
                        const T *qr = qp + (b * n + p) * Cq + h * hd;                 \
                        int64_t t = c->len + p + 1; /* visible: j0 .. t-1 */          \
                        int64_t j0 = window > 0 && t > window ? t - window : 0;       \
                        double mx = -INFINITY, sum = 0;                               \
                        for (int64_t j = j0; j < t; j++) {                            \
                            T s = 0;                                                  \
                            for (int64_t d = 0; d < hd; d++) s += qr[d] * kh[j * hd + d]; \
                            w[j] = (double)(T)(s * (T)scale);                         \
                            if (w[j] > mx) mx = w[j];                                 \
                        }                                                             \
                        for (int64_t j = j0; j < t; j++) sum += (w[j] = exp(w[j] - mx)); \
                        T *yr = yp + (b * n + p) * Cq + h * hd;                       \
                        for (int64_t d = 0; d < hd; d++) yr[d] = 0;                   \
                        for (int64_t j = j0; j < t; j++) {                            \
                            T wj = (T)(w[j] / sum);                                   \
                            for (int64_t d = 0; d < hd; d++) yr[d] += wj * vh[j * hd + d]; \
                        }                                                             \
                    }                                                                 \
            }                                                                         \
    }
    NB_DISPATCH(c->dtype, K);
#undef K
}

/* Attention of layer i over the cache and h's positions, appending h's keys
 * and values: h (B, n, C) -> (B, n, C), after the output projection. */
static nb_tensor *cached_attention(nb_ctx *ctx, nb_gpt *m, nb_gpt_cache *c, int i, nb_tensor *h) {
    nb_gpt_block *blk = &m->blocks[i];
    int64_t C = m->cfg.n_embd;
    nb_tensor *q, *k, *v;
    if (nb_gpt_layout(&m->cfg)->att == ATT_GQA) { /* normed and turned at positions len.. */
        if (nb_gpt_qkv(ctx, m, blk, h, c->len, &q, &k, &v)) return NULL;
    } else if (nb_gpt_layout(&m->cfg)->att == ATT_MHA_MODULE) { /* the module's projections */
        nb_nn_mha *a = &blk->att;
        k = nb_gpt_linear(ctx, h, a->W_key.weight, a->W_key.bias);
        v = nb_gpt_linear(ctx, h, a->W_value.weight, a->W_value.bias);
        q = nb_gpt_linear(ctx, h, a->W_query.weight, a->W_query.bias);
    } else {
        nb_tensor *part[3] = {NULL, NULL, NULL};
        nb_tensor *qkv = nb_gpt_linear(ctx, h, blk->c_attn_w, blk->c_attn_b);
        if (nb_split(ctx, qkv, 2, 3, (const int64_t[]){C, C, C}, part)) return NULL;
        q = part[0], k = part[1], v = part[2];
    }
    if (!q || !k || !v) return NULL;
    int64_t Cq = (int64_t)q->numel / (h->shape[0] * h->shape[1]);
    nb_tensor *y = nb_empty(ctx, m->cfg.dtype, 3, (const int64_t[]){h->shape[0], h->shape[1], Cq});
    double *w = nb_ctx_alloc(ctx, (size_t)c->cap * sizeof *w);
    if (!y || !w) return NULL;
    attend(c, i, q, k, v, y, 1.0 / sqrt((double)c->hd), m->cfg.window, w);
    if (nb_gpt_layout(&m->cfg)->att == ATT_GQA)
        return nb_gpt_linear(ctx, y, blk->wo, NULL);
    if (nb_gpt_layout(&m->cfg)->att == ATT_MHA_MODULE)
        return nb_gpt_linear(ctx, y, blk->att.out_proj.weight, blk->att.out_proj.bias);
    return nb_gpt_linear(ctx, y, blk->c_proj_w, blk->c_proj_b);
}

nb_tensor *nb_gpt_forward_cached(nb_ctx *ctx, nb_gpt *m, nb_gpt_cache *c, const nb_tensor *ids) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!c) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "gpt_forward_cached: cache is NULL");
        return NULL;
    }
    if (!nb_gpt_check_ids(ctx, m, ids, "ids", INT64_MAX)) return NULL;
    if (ids->shape[0] != c->batch || c->dtype != m->cfg.dtype || c->n_layer != m->cfg.n_layer ||
        c->heads != nb_gpt_kv_heads(&m->cfg) || c->hd != nb_gpt_head_dim(&m->cfg) ||
        c->cap != m->cfg.block_size) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "gpt_forward_cached: ids batch %lld, cache batch %lld "
                    "(the cache must be made for this model)", (long long)ids->shape[0],
                    (long long)c->batch);
        return NULL;
    }
    if (ids->shape[1] > c->cap - c->len) { /* len + n > block_size, as the header says */
        nb_ctx_fail(ctx, NB_ERR_VALUE, "gpt_forward_cached: %lld new positions do not fit: the "
                    "cache holds %lld of block_size %lld", (long long)ids->shape[1],
                    (long long)c->len, (long long)c->cap);
        return NULL;
    }
    bool grad = nb_set_grad_enabled(ctx, false), train = m->training;
    nb_gpt_train(m, false);
    nb_tensor *x = nb_gpt_embed(ctx, m, ids, c->len);
    for (int i = 0; i < m->cfg.n_layer && x; i++) {
        nb_tensor *a = cached_attention(ctx, m, c, i, nb_gpt_block_norm1(ctx, m, i, x));
        x = nb_gpt_block_finish(ctx, m, i, x, a);
    }
    x = nb_gpt_head(ctx, m, x);
    if (x) c->len += ids->shape[1];
    nb_gpt_train(m, train);
    nb_set_grad_enabled(ctx, grad);
    return x;
}

/* ---- generation ------------------------------------------------------------------ */

nb_gpt_sample_opts nb_gpt_sample_defaults(void) {
    return (nb_gpt_sample_opts){.max_new_tokens = 100, .temperature = 1.0, .top_k = 0,
                                .seed = 1337, .use_cache = true};
}

static int cmp_desc(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* One token from logits l (V doubles, overwritten): nanoGPT's rule. */
static int64_t draw(double *l, int64_t V, const nb_gpt_sample_opts *o, nb_pcg32 *rng,
                    double *tmp) {
    int64_t best = 0;
    for (int64_t j = 1; j < V; j++)
        if (l[j] > l[best]) best = j;
    if (o->temperature == 0) return best;
    for (int64_t j = 0; j < V; j++) l[j] /= o->temperature;
    if (o->top_k > 0 && o->top_k < V) {
        memcpy(tmp, l, (size_t)V * sizeof *tmp);
        qsort(tmp, (size_t)V, sizeof *tmp, cmp_desc);
        double kth = tmp[o->top_k - 1];
        for (int64_t j = 0; j < V; j++)
            if (l[j] < kth) l[j] = -INFINITY;
    }
    double mx = l[best], sum = 0;
    for (int64_t j = 0; j < V; j++) sum += (l[j] = exp(l[j] - mx));
    double u = nb_pcg32_double(rng) * sum, cum = 0;
    int64_t last = best;
    for (int64_t j = 0; j < V; j++) {
        if (l[j] <= 0) continue;
        cum += l[j];
        last = j;
        if (cum > u) return j;
    }
    return last;
}

/* The logits of the last of out[0..n-1]'s window, into l (V doubles). */
static bool next_logits(nb_ctx *ctx, nb_gpt *m, nb_gpt_cache *c, const int64_t *out, int64_t n,
                        double *l) {
    int64_t bs = m->cfg.block_size, start = n > bs ? n - bs : 0, from = start;
    if (c) {
        if (start > 0 || nb_gpt_cache_len(c) > n) nb_gpt_cache_reset(c);
        else from = nb_gpt_cache_len(c);
    }
    int64_t len = n - from;
    nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(1, len), out + from);
    nb_tensor *y = c ? nb_gpt_forward_cached(ctx, m, c, ids) : nb_gpt_infer(ctx, m, ids);
    if (!y) return false;
    int64_t V = m->cfg.vocab_size;
    for (int64_t j = 0; j < V; j++) l[j] = nb_get(y, (size_t)((len - 1) * V + j));
    return true;
}

nb_status nb_gpt_generate(nb_ctx *ctx, nb_gpt *m, const int64_t *prompt, int64_t n_prompt,
                          const nb_gpt_sample_opts *o, int64_t *out, int64_t *n_out) {
    const char *fn = "gpt_generate";
    if (n_out) *n_out = 0;
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!m || !m->wte || !prompt || !o || !out)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", fn,
                           !m || !m->wte ? "model" : !prompt ? "prompt" : !o ? "opts" : "out");
    if (n_prompt < 1 || o->max_new_tokens < 0 || !(o->temperature >= 0) || o->top_k < 0)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_prompt %lld, max_new_tokens %lld, "
                           "temperature %g, top_k %lld (need >= 1, >= 0, >= 0, >= 0)", fn,
                           (long long)n_prompt, (long long)o->max_new_tokens, o->temperature,
                           (long long)o->top_k);
    for (int64_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= m->cfg.vocab_size)
            return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: prompt[%lld] = %lld is outside [0, %lld)",
                               fn, (long long)i, (long long)prompt[i],
                               (long long)m->cfg.vocab_size);
    int64_t V = m->cfg.vocab_size;
    nb_ctx *work = nb_ctx_new(0);
    double *l = malloc((size_t)V * sizeof *l), *tmp = malloc((size_t)V * sizeof *tmp);
    nb_gpt_cache *c = o->use_cache ? nb_gpt_cache_new(ctx, m, 1) : NULL;
    nb_status st = NB_OK;
    if (!work || !l || !tmp || (o->use_cache && !c)) {
        st = nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", fn);
        goto done;
    }
    memmove(out, prompt, (size_t)n_prompt * sizeof *out);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, o->seed, 54);
    int64_t n = n_prompt;
    for (int64_t i = 0; i < o->max_new_tokens; i++) {
        nb_ctx_reset(work);
        if (!next_logits(work, m, c, out, n, l)) {
            st = nb_ctx_fail(ctx, nb_ctx_status(work), "%s: %s", fn, nb_ctx_error(work));
            break;
        }
        out[n] = draw(l, V, o, &rng, tmp);
        n++;
        if (o->on_token && o->on_token(out[n - 1], o->user)) break;
    }
    if (n_out) *n_out = n;
done:
    nb_gpt_cache_free(c);
    free(l);
    free(tmp);
    nb_ctx_free(work);
    return st;
}
