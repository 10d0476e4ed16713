/* ops/attention.c - sdpa: fused scaled dot-product attention, computed
 * flash-attention style.
 *
 *   q (B, Tq, H, hd), k (B, Tk, Hkv, hd), v (B, Tk, Hkv, hdv) -> out (B, Tq, H * hdv)
 *   out[b, i, h] = sum_j dropout(softmax_j(scale * q[b,i,h] . k[b,j,g])) v[b,j,g]
 *   g = h / R, R = H / Hkv query heads per key/value head (1: multi-head)
 *
 * The inputs are read in the layout the Q/K/V projections produce (their
 * (B, T, H * hd) outputs viewed as (B, T, H, hd)) and the output is written
 * in the layout out_proj reads, so splitting and merging the heads costs no
 * copies. Each head's (Tq, Tk) weights are never stored: queries are taken
 * in tiles of SDPA_BQ rows against keys in tiles of SDPA_BK, with an online
 * softmax (a running max and sum per query row); backward recomputes every
 * tile from the saved row log-sum-exp, O(B H Tq) numbers. Tiles that the
 * causal or padding mask hides completely are skipped in both directions,
 * and within a tile the causal products go by groups of SDPA_RG rows, each
 * only as far as it sees. A sliding window (query i sees keys i - window <
 * j <= i) hides tiles below the diagonal band the same way, and its lower
 * edge cuts the groups' products from the left as causal cuts them from
 * the right.
 *
 * Grouped-query attention reads key/value head g = h / R in place for
 * query head h: K^T is transposed once per key/value head, and the
 * backward runs the R query heads of a group one after another on one
 * thread, adding into one dK, dV of that key/value head.
 *
 * Dropout never stores its mask either: the keep bits of query row i of
 * head (b, h) are the draws of PCG32 seeded (seed, stream (b H + h) Tq + i),
 * key j taking the j-th draw (reached by nb_pcg32_advance), kept when
 * (draw >> 8) >= ceil(p 2^24) as nb_dropout decides. Backward regenerates
 * them, and nb_sdpa_dropout_mask writes them out for inspection. The bits
 * depend on the seed and the sizes only, not on the tiles or the threads.
 *
 * The forward is split over (batch, head, query tile), the backward over
 * (batch, key/value head): every output element is computed by one thread
 * in a fixed order (a group's query heads in order), so results are the
 * same bits on any thread count. */
#include "ops/ops_internal.h"

#define SDPA_BQ 64 /* query rows per tile */
#define SDPA_BK 64 /* keys per tile */
/* Rows per group in a tile's products: under the causal mask, a group of
 * queries multiplies only the keys its last row sees, and a group of keys
 * only the queries from the first that sees it, about 5/8 of a 64 x 64
 * tile's work on the diagonal. Both tiles' sizes are multiples of it, so
 * the query and key groups line up (see the backward). */
#define SDPA_RG 16
_Static_assert(SDPA_BQ % SDPA_RG == 0 && SDPA_BK % SDPA_RG == 0, "tiles of whole groups");

/* One call: sizes, data, and what the masks hide. */
typedef struct sdpa_job {
    nb_dtype dtype;
    int64_t B, Tq, Tk, H, Hkv, R, hd, hdv, nqt; /* R = H / Hkv; nqt: query tiles per head */
    const void *q, *k, *v; /* (B, Tq, H, hd), (B, Tk, Hkv, hd), (B, Tk, Hkv, hdv) */
    void *o;               /* (B, Tq, H * hdv) */
    void *lse;             /* (B, H, Tq): m + log(l) per query row */
    void *acc;             /* scratch, see the kernels */
    void *kt;              /* forward: K^T per key/value head (B, Hkv, hd, Tk) */
    const uint8_t *pad;    /* (B, Tk), true = padding; NULL for none */
    bool causal;
    int64_t window;        /* > 0: query i sees keys j > i - window (with causal); 0: all */
    double scale;
    bool dropout;        /* 0 < p */
    uint32_t threshold;  /* keep when (draw >> 8) >= threshold */
    double keep_scale;   /* 1 / (1 - p), 0 for p == 1 */
    uint64_t seed;
    const void *dout;    /* backward: out's gradient (B, Tq, H * hdv) */
    void *gq, *gk, *gv;  /* backward: the inputs' gradients, or NULL */
    bool fresh[3];       /* gq, gk, gv new: stored (=), not added to */
} sdpa_job;

/* How many keys of [j0, j0 + bk) the causal mask lets query i see: the
 * first ones, up to key i. */
static inline int64_t causal_limit(const sdpa_job *J, int64_t i, int64_t j0, int64_t bk) {
    int64_t lim = J->causal ? i - j0 + 1 : bk;
    return lim < 0 ? 0 : lim > bk ? bk : lim;
}

/* The first key of [j0, j0 + bk) the window lets query i see (0 without
 * a window; bk when it sees none of them). */
static inline int64_t window_start(const sdpa_job *J, int64_t i, int64_t j0, int64_t bk) {
    int64_t lo = J->window > 0 ? i - J->window + 1 - j0 : 0;
    return lo < 0 ? 0 : lo > bk ? bk : lo;
}

/* Whether some query of [i0, i0 + bq) sees some key of [j0, j0 + bk). */
static bool tile_visible(const sdpa_job *J, int64_t b, int64_t i0, int64_t bq, int64_t j0,
                         int64_t bk) {
    if (J->causal && j0 > i0 + bq - 1) return false;
    if (J->window > 0 && j0 + bk - 1 <= i0 - J->window) return false; /* below the band */
    if (!J->pad) return true;
    for (int64_t c = 0; c < bk; c++)
        if (!J->pad[b * J->Tk + j0 + c]) return true;
    return false;
}

/* Rows in the group of rows starting at g0 of a tile of n (SDPA_RG but the
 * last). */
static inline int64_t group_rows(int64_t n, int64_t g0) {
    return n - g0 < SDPA_RG ? n - g0 : SDPA_RG;
}

/* Keys [cs[g], nc[g]) of [j0, j0 + bk) are those query group g of tile
 * [i0, i0 + bq) multiplies: from the first its first row sees (the window)
 * to the last its last row sees (causal). */
static void group_limits(const sdpa_job *J, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                         int64_t *cs, int64_t *nc) {
    for (int64_t g0 = 0; g0 < bq; g0 += SDPA_RG) {
        nc[g0 / SDPA_RG] = causal_limit(J, i0 + g0 + group_rows(bq, g0) - 1, j0, bk);
        cs[g0 / SDPA_RG] = window_start(J, i0 + g0, j0, bk);
    }
}

/* lo[r] = the first key of [j0, j0 + bk) query i0 + r sees, r < bq;
 * whether some is not 0 (the window cuts into the tile). */
static bool row_starts(const sdpa_job *J, int64_t i0, int64_t bq, int64_t j0, int64_t bk,
                       int64_t *lo) {
    bool any = false;
    for (int64_t r = 0; r < bq; r++) {
        lo[r] = window_start(J, i0 + r, j0, bk);
        any |= lo[r] > 0;
    }
    return any;
}

/* keep[c] for keys j0 .. j0 + bk - 1 (bk <= SDPA_BK) of query i, head (b, h). */
static void keep_row(const sdpa_job *J, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t bk,
                     uint8_t *keep) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, J->seed, (uint64_t)((b * J->H + h) * J->Tq + i));
    nb_pcg32_advance(&rng, (uint64_t)j0);
    nb_vec()->pcg32_keep(&rng, keep, (size_t)bk, J->threshold);
}

static void set_dropout(sdpa_job *J, double p, uint64_t seed) {
    J->dropout = p > 0.0;
    J->threshold = (uint32_t)ceil(p * 0x1p24); /* 2^24 for p == 1: nothing kept */
    J->keep_scale = p < 1.0 ? 1.0 / (1.0 - p) : 0.0;
    J->seed = seed;
}

#define SDPA_T float
#define SDPA_IS_FLOAT 1
#include "attention_tiles.h"
#undef SDPA_T
#define SDPA_T double
#define SDPA_IS_FLOAT 0
#include "attention_tiles.h"
#undef SDPA_T

static void forward_range(void *arg, int64_t begin, int64_t end) {
    const sdpa_job *J = arg;
    for (int64_t t = begin; t < end; t++) {
        int64_t bh = t / J->nqt, qt = t % J->nqt;
        if (J->dtype == NB_F32)
            sdpa_forward_tile_float(J, bh / J->H, bh % J->H, qt);
        else
            sdpa_forward_tile_double(J, bh / J->H, bh % J->H, qt);
    }
}

/* K^T of key/value heads [begin, end) of the B * Hkv */
static void transpose_range(void *arg, int64_t begin, int64_t end) {
    const sdpa_job *J = arg;
    int64_t ld = J->Hkv * J->hd, per_head = J->hd * J->Tk;
    for (int64_t bh = begin; bh < end; bh++) {
        int64_t b = bh / J->Hkv, h = bh % J->Hkv, off = b * J->Tk * ld + h * J->hd;
        size_t es = nb_dtype_size(J->dtype);
        nb_transpose_dt(J->dtype, (char *)J->kt + (size_t)(bh * per_head) * es,
                        (const char *)J->k + (size_t)off * es, (size_t)ld, (size_t)J->Tk,
                        (size_t)J->hd);
    }
}

/* key/value heads [begin, end) of the B * Hkv, each with its query heads */
static void backward_range(void *arg, int64_t begin, int64_t end) {
    const sdpa_job *J = arg;
    for (int64_t bg = begin; bg < end; bg++) {
        if (J->dtype == NB_F32)
            sdpa_backward_group_float(J, bg / J->Hkv, bg % J->Hkv);
        else
            sdpa_backward_group_double(J, bg / J->Hkv, bg % J->Hkv);
    }
}

/* Work items per thread worth waking a worker for, given the multiply-adds
 * of one item. */
static int64_t min_items(int64_t madds_per_item) {
    const int64_t enough = 1 << 16;
    return madds_per_item >= enough ? 1 : (enough + madds_per_item - 1) / madds_per_item;
}

/* The job of a call, without its data pointers for out and gradients. */
static void job_init(sdpa_job *J, const nb_tensor *q, const nb_tensor *k, const nb_tensor *v,
                     const nb_tensor *pad, bool causal, int64_t window, double scale, double p,
                     uint64_t seed) {
    memset(J, 0, sizeof *J);
    J->dtype = q->dtype;
    J->B = q->shape[0], J->Tq = q->shape[1], J->H = q->shape[2], J->hd = q->shape[3];
    J->Tk = k->shape[1], J->Hkv = k->shape[2], J->hdv = v->shape[3];
    J->R = J->Hkv > 0 ? J->H / J->Hkv : 1;
    J->nqt = (J->Tq + SDPA_BQ - 1) / SDPA_BQ;
    J->q = q->data, J->k = k->data, J->v = v->data;
    J->pad = pad ? pad->data : NULL;
    J->causal = causal;
    J->window = window < J->Tq ? window : 0; /* as wide as the queries: hides nothing more */
    J->scale = scale;
    set_dropout(J, p, seed);
}

/* ---- checks ------------------------------------------------------------------ */

/* The shape error of q, k and v, all three shapes named, then `what`; the
 * shapes are formatted only here, never on the path that succeeds. */
static bool sizes_fail(nb_ctx *ctx, const char *op, const nb_tensor *q, const nb_tensor *k,
                       const nb_tensor *v, const char *what) {
    char sq[64], sk[64], sv[64];
    nb_shape_str(q, sq, sizeof sq), nb_shape_str(k, sk, sizeof sk), nb_shape_str(v, sv, sizeof sv);
    nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: q %s, k %s, v %s%s", op, sq, sk, sv, what);
    return false;
}

static bool check_sizes(nb_ctx *ctx, const char *op, nb_tensor *q, nb_tensor *k, nb_tensor *v) {
    nb_tensor *in[3] = {q, k, v};
    static const char *const names[3] = {"q", "k", "v"};
    if (!nb_ctx_ok(ctx)) return false;
    for (int i = 0; i < 3; i++)
        if (!in[i]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", op, names[i]);
            return false;
        }
    if (!nb_check_float_inputs(ctx, op, 3, in)) return false;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4)
        return sizes_fail(ctx, op, q, k, v,
                          ": expected 4 dims each, (B, T, heads, head_dim) (view a (B, T, heads "
                          "* head_dim) projection as that)");
    const int64_t *a = q->shape, *b = k->shape, *c = v->shape;
    if (b[0] != a[0] || b[3] != a[3] || c[0] != a[0] || c[1] != b[1] || c[2] != b[2])
        return sizes_fail(ctx, op, q, k, v,
                          " do not fit: expected q (B, Tq, H, hd), k (B, Tk, Hkv, hd), v (B, "
                          "Tk, Hkv, hdv)");
    if (b[2] != a[2] && (b[2] == 0 || a[2] % b[2] != 0))
        return sizes_fail(ctx, op, q, k, v,
                          ": the key/value heads (dim 2 of k and v) must divide the query "
                          "heads (dim 2 of q)");
    return true;
}

static bool check_options(nb_ctx *ctx, const char *op, const nb_tensor *q, const nb_tensor *k,
                          const nb_tensor *mask, bool causal, int64_t window, double scale,
                          double p) {
    char s[64], sk[64];
    if (window < 0) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: window %lld is negative (0 is no window)", op,
                    (long long)window);
        return false;
    }
    if (window > 0 && !causal) {
        nb_ctx_fail(ctx, NB_ERR_VALUE,
                    "%s: window %lld needs causal (the window is the last keys up to the query)",
                    op, (long long)window);
        return false;
    }
    if (mask && mask->dtype != NB_BOOL) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: key_padding_mask %s is %s, expected bool", op,
                    nb_shape_str(mask, s, sizeof s), nb_dtype_name(mask->dtype));
        return false;
    }
    if (mask && (mask->ndim != 2 || mask->shape[0] != q->shape[0] ||
                 mask->shape[1] != k->shape[1])) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: key_padding_mask has shape %s, expected (%lld, %lld) (batch, keys) "
                    "for k %s",
                    op, nb_shape_str(mask, s, sizeof s), (long long)q->shape[0],
                    (long long)k->shape[1], nb_shape_str(k, sk, sizeof sk));
        return false;
    }
    if (!isfinite(scale)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: scale %g is not finite", op, scale);
        return false;
    }
    if (!(p >= 0.0 && p <= 1.0)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: dropout_p %g is outside [0, 1]", op, p);
        return false;
    }
    return true;
}

/* ---- forward ------------------------------------------------------------------ */
static void sdpa_backward(nb_ctx *ctx, nb_node *n); /* below, after the forward */
static nb_tensor *sdpa_composed(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                                const nb_tensor *mask, bool causal, int64_t window, double scale,
                                double p, uint64_t seed); /* below */

/* nb_sdpa and nb_sdpa_ex, the options checked */
static nb_tensor *sdpa(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                       const nb_tensor *key_padding_mask, bool causal, int64_t window,
                       double scale, double dropout_p, uint64_t seed) {
    if (q->numel == 0 || k->numel == 0 || v->numel == 0) /* zero-size dims: not for the tiles */
        return sdpa_composed(ctx, q, k, v, key_padding_mask, causal, window, scale, dropout_p,
                             seed);
    sdpa_job J;
    job_init(&J, q, k, v, key_padding_mask, causal, window, scale, dropout_p, seed);
    nb_tensor *out = nb_empty(ctx, q->dtype, NB_SHAPE(J.B, J.Tq, J.H * J.hdv));
    size_t es = nb_dtype_size(q->dtype);
    J.lse = out ? nb_ctx_alloc_raw(ctx, (size_t)(J.B * J.H * J.Tq) * es) : NULL;
    J.acc = J.lse ? nb_ctx_scratch(ctx, out->numel * es) : NULL; /* (B, H, Tq, hdv) */
    J.kt = J.acc ? nb_ctx_scratch(ctx, k->numel * es) : NULL;   /* (B, Hkv, hd, Tk) */
    if (!J.kt) return NULL;
    J.o = out->data;
    nb_parallel_for(J.B * J.Hkv, min_items(J.Tk * J.hd * 16), transpose_range, &J);
    nb_parallel_for(J.B * J.H * J.nqt, min_items(SDPA_BQ * J.Tk * (J.hd + J.hdv)), forward_range,
                    &J);
    nb_ctx_give_back(ctx, J.kt, k->numel * es); /* scratch: the next sdpa reuses them */
    nb_ctx_give_back(ctx, J.acc, out->numel * es);
    nb_tensor *in[3] = {q, k, v};
    nb_node *n = nb_record_op(ctx, NB_OP_SDPA, out, 3, in, sdpa_backward);
    if (n) {
        n->saved = J.lse;
        n->f[0] = scale;
        n->f[1] = dropout_p;
        n->i[0] = causal;
        n->i[1] = (int64_t)seed;
        n->i[2] = window;
        if (key_padding_mask) {
            n->saved_t = nb_copy(ctx, key_padding_mask, NB_BOOL);
            if (!n->saved_t) return NULL;
        }
    }
    return out;
}

nb_tensor *nb_sdpa(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                   const nb_tensor *key_padding_mask, bool causal, double scale,
                   double dropout_p, uint64_t seed) {
    const char *op = nb_op_name(NB_OP_SDPA);
    if (!check_sizes(ctx, op, q, k, v) ||
        !check_options(ctx, op, q, k, key_padding_mask, causal, 0, scale, dropout_p))
        return NULL;
    return sdpa(ctx, q, k, v, key_padding_mask, causal, 0, scale, dropout_p, seed);
}

nb_tensor *nb_sdpa_ex(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                      const nb_sdpa_opts *opts) {
    const char *op = "sdpa_ex";
    const nb_sdpa_opts none = {0};
    const nb_sdpa_opts *o = opts ? opts : &none;
    if (!check_sizes(ctx, op, q, k, v) ||
        !check_options(ctx, op, q, k, o->key_padding_mask, o->causal, o->window, o->scale,
                       o->dropout_p))
        return NULL;
    double scale = o->scale != 0 ? o->scale : 1.0 / sqrt((double)q->shape[3]);
    return sdpa(ctx, q, k, v, o->key_padding_mask, o->causal, o->window, scale, o->dropout_p,
                o->seed);
}

nb_tensor *nb_sdpa_dropout_mask(nb_ctx *ctx, int64_t batch, int64_t heads, int64_t t_q,
                                int64_t t_k, double p, uint64_t seed) {
    const char *op = "sdpa_dropout_mask";
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!(p >= 0.0 && p <= 1.0)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: p %g is outside [0, 1]", op, p);
        return NULL;
    }
    nb_tensor *mask = nb_empty(ctx, NB_BOOL, NB_SHAPE(batch, heads, t_q, t_k));
    if (!mask) return NULL; /* bad sizes: nb_empty's error */
    sdpa_job J = {.H = heads, .Tq = t_q, .Tk = t_k};
    set_dropout(&J, p, seed);
    uint8_t *m = mask->data;
    for (int64_t b = 0; b < batch; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < t_q; i++, m += t_k)
                for (int64_t j0 = 0; j0 < t_k; j0 += SDPA_BK) {
                    int64_t bk = t_k - j0 < SDPA_BK ? t_k - j0 : SDPA_BK;
                    if (J.dropout)
                        keep_row(&J, b, h, i, j0, bk, m + j0);
                    else
                        memset(m + j0, 1, (size_t)bk);
                }
    return mask;
}

/* ---- backward ---------------------------------------------------------------
 * Gradients of q, k and v (those that require them); reuses the output O,
 * the saved lse (node->saved), the saved copy of the padding mask
 * (saved_t), and the parameters: f[0] scale, f[1] p, i[0] causal, i[1]
 * seed, i[2] window. */
static void sdpa_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *q = n->in[0], *k = n->in[1], *v = n->in[2];
    sdpa_job J;
    job_init(&J, q, k, v, n->saved_t, n->i[0] != 0, n->i[2], n->f[0], n->f[1],
             (uint64_t)n->i[1]);
    J.o = n->out->data;
    J.dout = n->out->grad;
    J.lse = n->saved;
    /* q, k and v may be one tensor (then H == Hkv): the first asked gets a
     * fresh buffer, the others add to it, and each thread writes its
     * heads' slices of gq, then gk, then gv */
    J.gq = nb_grad_buffer_fresh(ctx, q, &J.fresh[0]);
    J.gk = nb_grad_buffer_fresh(ctx, k, &J.fresh[1]);
    J.gv = nb_grad_buffer_fresh(ctx, v, &J.fresh[2]);
    if (!J.gq && !J.gk && !J.gv) return;
    size_t per_head = (size_t)(J.Tq * J.hd + 2 * J.Tk * J.hd + 2 * J.Tk * J.hdv);
    size_t acc_bytes = (size_t)(J.B * J.Hkv) * per_head * nb_dtype_size(q->dtype);
    J.acc = nb_ctx_scratch(ctx, acc_bytes);
    if (!J.acc) return;
    nb_parallel_for(J.B * J.Hkv, min_items(J.R * J.Tq * J.Tk * (2 * J.hd + 3 * J.hdv)),
                    backward_range, &J);
    nb_ctx_give_back(ctx, J.acc, acc_bytes);
}

/* ---- the composed form ------------------------------------------------------
 * The ops the header comment names (reshape, permute, matmul, scale,
 * causal_fill, masked_fill, softmax, the same dropout mask, matmul),
 * recorded: the graph backward differentiates it (the flash kernels stay
 * the first-order path), and tensors with a zero-size dim, which the tiles
 * do not take, go through it forward. A group's R query heads stand on a
 * dim of their own, (B, Hkv, R, T, .), so that the products broadcast its
 * key/value head over them (no repeated copy of k and v). mask is (B, Tk)
 * BOOL or NULL; window > 0 hides keys j <= i - window. */
static nb_tensor *sdpa_composed(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                                const nb_tensor *mask, bool causal, int64_t window, double scale,
                                double p, uint64_t seed) {
    int64_t B = q->shape[0], Tq = q->shape[1], H = q->shape[2], hd = q->shape[3];
    int64_t Tk = k->shape[1], Hkv = k->shape[2], hdv = v->shape[3];
    int64_t R = Hkv > 0 ? H / Hkv : 1;
    const int to_heads[5] = {0, 2, 3, 1, 4}; /* (B, T, Hkv, R, d) -> (B, Hkv, R, T, d) */
    nb_tensor *qh = nb_permute(ctx, nb_reshape(ctx, q, NB_SHAPE(B, Tq, Hkv, R, hd)), to_heads);
    nb_tensor *kt = nb_permute(ctx, nb_reshape(ctx, k, NB_SHAPE(B, Tk, Hkv, 1, hd)),
                               (const int[]){0, 2, 3, 4, 1}); /* (B, Hkv, 1, hd, Tk) */
    nb_tensor *vh = nb_permute(ctx, nb_reshape(ctx, v, NB_SHAPE(B, Tk, Hkv, 1, hdv)),
                               to_heads); /* (B, Hkv, 1, Tk, hdv) */
    nb_tensor *s = nb_reshape(ctx, nb_scale(ctx, nb_matmul(ctx, qh, kt), scale),
                              NB_SHAPE(B, H, Tq, Tk));
    if (causal) s = nb_causal_fill(ctx, s, -INFINITY);
    if (window > 0 && window < Tq) { /* wider: hides nothing causal does not */
        nb_tensor *m = nb_zeros(ctx, NB_BOOL, NB_SHAPE(1, 1, Tq, Tk));
        if (!m) return NULL;
        bool *mb = m->data;
        for (int64_t i = 0; i < Tq; i++)
            for (int64_t j = 0; j <= i - window && j < Tk; j++) mb[i * Tk + j] = true;
        s = nb_masked_fill(ctx, s, m, -INFINITY);
    }
    if (mask) {
        nb_tensor *m = nb_from_data(ctx, NB_BOOL, NB_SHAPE(B, 1, 1, Tk), mask->data);
        s = nb_masked_fill(ctx, s, m, -INFINITY);
    }
    nb_tensor *w = nb_softmax(ctx, s);
    if (p > 0) {
        nb_tensor *keep = nb_sdpa_dropout_mask(ctx, B, H, Tq, Tk, p, seed);
        nb_tensor *m = keep ? nb_zeros(ctx, q->dtype, 4, keep->shape) : NULL;
        if (!m) return NULL;
        const bool *kb = keep->data;
        for (size_t i = 0; i < m->numel; i++)
            if (kb[i]) nb_set(m, i, 1.0 / (1.0 - p));
        w = nb_mul(ctx, w, m);
    }
    nb_tensor *o = nb_matmul(ctx, nb_reshape(ctx, w, NB_SHAPE(B, Hkv, R, Tq, Tk)), vh);
    o = nb_permute(ctx, nb_reshape(ctx, o, NB_SHAPE(B, H, Tq, hdv)), (const int[]){0, 2, 1, 3});
    return nb_reshape(ctx, o, NB_SHAPE(B, Tq, H * hdv));
}

void nb_graph_backward_sdpa(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *y = sdpa_composed(ctx, n->in[0], n->in[1], n->in[2], n->saved_t, n->i[0] != 0,
                                 n->i[2], n->f[0], n->f[1], (uint64_t)n->i[1]);
    nb_graph_backward_composed(ctx, n, y, dout, din);
}

/* forward mode: through the composed form (mask, causal, window, GQA and
 * dropout from the node), whose elementary ops carry q's, k's and v's
 * tangents, when the tangent is recorded or a mask or dropout is set */
static nb_tensor *sdpa_build(nb_ctx *ctx, const nb_node *n, nb_tensor *const *x) {
    return sdpa_composed(ctx, x[0], x[1], x[2], n->saved_t, n->i[0] != 0, n->i[2], n->f[0],
                         n->f[1], (uint64_t)n->i[1]);
}

nb_tensor *nb_forward_sdpa(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    /* one pass per head when nothing records the tangent and no key mask
     * or dropout is in play (ops/sdpa_forward.c) */
    if (nb_fwd_unrecorded(ctx, n, tin) && !n->saved_t && n->f[1] == 0 && n->out->numel > 0)
        return nb_sdpa_tangent_fused(ctx, n, tin);
    return nb_forward_composed(ctx, n, tin, sdpa_build);
}
