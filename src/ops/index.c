/* ops/index.c - top-k along a dim, and the row gather and scatter-add a
 * mixture-of-experts layer routes tokens with: topk, index_select, index_add.
 *
 * topk picks positions; index_select sends the chosen rows to an expert;
 * index_add brings the expert's rows back. Each op's backward is the other
 * one's forward (index_select's is an index_add of dout, index_add's is an
 * index_select of dout; topk's an index_add into the flattened input), so
 * their graph backwards are these ops again, to any order.
 *
 * The indices are copied into the arena at the forward (node->saved, the
 * count in node->i[2]): the caller may change or free its idx before
 * backward. Scatter-adds run in the order of idx, each column on one thread
 * (threads split the columns, never the rows), so repeated ids add up in
 * the same order, and to the same bits, for any thread count. */
#include "ops/ops_internal.h"

#include <stdlib.h>

/* ---- shared: the saved copy of the indices ------------------------------ */

/* A copy of n int64 indices in ctx's arena (n may be 0); NULL on failure. */
static int64_t *save_ids(nb_ctx *ctx, const int64_t *ids, size_t n) {
    int64_t *s = nb_ctx_alloc_raw(ctx, n ? n * sizeof *s : sizeof *s);
    if (s && n) memcpy(s, ids, n * sizeof *s);
    return s;
}

/* The saved indices of node n as an I64 tensor of shape (count). */
static nb_tensor *saved_ids(nb_ctx *ctx, const nb_node *n) {
    return nb_from_data(ctx, NB_I64, 1, (const int64_t[]){n->i[2]}, n->saved);
}

/* Checks idx: present, live, I64, 1-D, every id in [0, rows); `what` names
 * the tensor whose rows idx indexes ("x", "base"). False with the error. */
static bool check_ids(nb_ctx *ctx, const char *op, const nb_tensor *idx, const char *what,
                      const nb_tensor *t) {
    char si[64], st[64];
    if (!idx) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: idx is NULL", op);
        return false;
    }
    if (!nb_check_live(ctx, op, 1, &idx)) return false;
    if (idx->dtype != NB_I64) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: idx %s is %s, expected i64", op,
                    nb_shape_str(idx, si, sizeof si), nb_dtype_name(idx->dtype));
        return false;
    }
    if (idx->ndim != 1) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: idx %s has %d dims, expected 1", op,
                    nb_shape_str(idx, si, sizeof si), idx->ndim);
        return false;
    }
    const int64_t *id = idx->data;
    for (size_t p = 0; p < idx->numel; p++)
        if (id[p] < 0 || id[p] >= t->shape[0]) {
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: idx[%zu] = %lld is out of range for %s %s: expected 0 <= id < %lld",
                        op, p, (long long)id[p], what, nb_shape_str(t, st, sizeof st),
                        (long long)t->shape[0]);
            return false;
        }
    return true;
}

/* ---- the row scatter-add both backwards and index_add use ----------------
 * dst (N, D) row id[p] += src (P, D) row p, for p in order. Threads take
 * column ranges: each element's sum runs in the one order of idx. */
typedef struct scatter_job {
    void *dst;
    const void *src;
    const int64_t *id;
    size_t P, D;
    nb_dtype dt;
} scatter_job;

static void scatter_range(void *arg, int64_t c0, int64_t c1) {
    const scatter_job *j = arg;
    if (j->dt == NB_F32) { /* the same adds, as SIMD */
        const nb_vec_kernels *vk = nb_vec();
        for (size_t p = 0; p < j->P; p++)
            vk->add((float *)j->dst + (size_t)j->id[p] * j->D + c0,
                    (const float *)j->src + p * j->D + c0, (size_t)(c1 - c0));
        return;
    }
#define K_(T)                                                                     \
    {                                                                             \
        T *d = j->dst;                                                            \
        const T *s = j->src;                                                      \
        for (size_t p = 0; p < j->P; p++) {                                       \
            T *dr = d + (size_t)j->id[p] * j->D;                                  \
            const T *sr = s + p * j->D;                                           \
            for (size_t c = (size_t)c0; c < (size_t)c1; c++) dr[c] += sr[c];      \
        }                                                                         \
    }
    NB_DISPATCH(j->dt, K_);
#undef K_
}

#define SCATTER_GRAIN 64 /* columns a thread takes at least */

static void scatter_add_rows(nb_dtype dt, void *dst, const void *src, const int64_t *id,
                             size_t P, size_t D) {
    scatter_job j = {dst, src, id, P, D, dt};
    if (P * D < (1u << 15)) /* small: one thread */
        scatter_range(&j, 0, (int64_t)D);
    else
        nb_parallel_for((int64_t)D, SCATTER_GRAIN, scatter_range, &j);
}

/* ---- the row gathers: dst (P, D) row p = (or +=) src (N, D) row id[p] ----
 * Threads take ranges of dst's rows (each row is one thread's), 64 KB of
 * rows at least (a mixture of experts gathers some 800 KB of token rows a
 * layer, and its backward as much). */
typedef struct gather_job {
    void *dst;
    const void *src;
    const int64_t *id;
    size_t D;
    nb_dtype dt;
    bool add;
} gather_job;

static void gather_range(void *arg, int64_t p0, int64_t p1) {
    const gather_job *j = arg;
    const size_t row = j->D * nb_dtype_size(j->dt);
    if (!j->add) {
        for (int64_t p = p0; p < p1; p++)
            memcpy((char *)j->dst + (size_t)p * row, (const char *)j->src + (size_t)j->id[p] * row,
                   row);
        return;
    }
    if (j->dt == NB_F32) { /* the same adds, as SIMD */
        const nb_vec_kernels *vk = nb_vec();
        for (int64_t p = p0; p < p1; p++)
            vk->add((float *)j->dst + (size_t)p * j->D,
                    (const float *)j->src + (size_t)j->id[p] * j->D, j->D);
        return;
    }
#define K_(T)                                                                     \
    {                                                                             \
        T *d = j->dst;                                                            \
        const T *s = j->src;                                                      \
        for (int64_t p = p0; p < p1; p++) {                                       \
            const T *sr = s + (size_t)j->id[p] * j->D;                            \
            T *dr = d + (size_t)p * j->D;                                         \
            for (size_t c = 0; c < j->D; c++) dr[c] += sr[c];                     \
        }                                                                         \
    }
    NB_DISPATCH(j->dt, K_);
#undef K_
}

/* dst (P, D) row p = src (N, D) row id[p], or += when add. */
static void gather(nb_dtype dt, void *dst, const void *src, const int64_t *id, size_t P,
                   size_t D, bool add) {
    const size_t row = D * nb_dtype_size(dt);
    if (!row || !P) return; /* rows of 0 elements: nothing to copy */
    gather_job j = {dst, src, id, D, dt, add};
    nb_parallel_for((int64_t)P, (int64_t)((1u << 16) / row + 1), gather_range, &j);
}

/* Elements in a row of t (N, ...): numel / N, and the product of the
 * trailing dims when N is 0. */
static size_t row_len(const nb_tensor *t) {
    size_t D = 1;
    for (int d = 1; d < t->ndim; d++) D *= (size_t)t->shape[d];
    return D;
}

/* ==========================================================================
 * topk: x (..., n, ...) along dim d -> values (..., k, ...), indices I64 of
 * the same shape: the k largest along d, largest first; equal values in
 * the order of their index (lower first), a NaN above every number (NaNs
 * among themselves by index). PyTorch returns the same values, but orders
 * equal values however its selection left them (see the function's
 * comment in ops.h).
 * As a reduction, x is (outer, n, inner) and lane (o, c) is the n elements
 * x[o, :, c]; out[o, j, c] = x[o, am[o, j, c], c].
 * Backward: dx[o, am[o,j,c], c] += g[o, j, c] (the k ids of a lane differ).
 * ========================================================================== */

typedef struct topk_item {
    double v;
    int64_t i;
} topk_item;

/* True when a comes before b: larger, NaN above numbers, ties by index. */
static bool topk_before(topk_item a, topk_item b) {
    bool an = a.v != a.v, bn = b.v != b.v;
    if (an || bn) return an && (!bn || a.i < b.i);
    return a.v > b.v || (a.v == b.v && a.i < b.i);
}

static int topk_cmp(const void *pa, const void *pb) {
    topk_item a = *(const topk_item *)pa, b = *(const topk_item *)pb;
    return topk_before(a, b) ? -1 : topk_before(b, a) ? 1 : 0;
}

#define TOPK_INSERT_MAX 16 /* up to this k, an insertion into k sorted slots */

static void topk_backward(nb_ctx *ctx, nb_node *nd); /* below, after the forward */

nb_tensor *nb_topk(nb_ctx *ctx, nb_tensor *x, int k, int dim, nb_tensor **indices) {
    if (indices) *indices = NULL;
    const char *op = nb_op_name(NB_OP_TOPK);
    if (!nb_check_float_inputs(ctx, op, 1, &x)) return NULL;
    int d = x->ndim == 0 && (dim == 0 || dim == -1) ? 0 : nb_norm_dim(ctx, op, x, dim);
    if (d < 0) return NULL;
    int64_t n = x->ndim ? x->shape[d] : 1;
    char s[64];
    if (k < 0 || k > n || (x->ndim == 0 && k != 1)) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: k = %d is out of range for x %s along dim %d: "
                    "expected 0 <= k <= %lld%s", op, k, nb_shape_str(x, s, sizeof s), dim,
                    (long long)n, x->ndim == 0 ? " (k = 1 for a 0-dim x)" : "");
        return NULL;
    }
    int64_t shape[NB_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = i == d ? k : x->shape[i];
    nb_tensor *out = nb_empty(ctx, x->dtype, x->ndim, shape);
    if (!out) return NULL;
    size_t outer = 1, inner = 1;
    for (int i = 0; i < d; i++) outer *= (size_t)x->shape[i];
    for (int i = d + 1; i < x->ndim; i++) inner *= (size_t)x->shape[i];
    size_t N = (size_t)n, K = (size_t)k;
    int64_t *am = nb_ctx_alloc_raw(ctx, out->numel ? out->numel * sizeof *am : sizeof *am);
    topk_item *buf = nb_ctx_scratch(ctx, (N + 1) * sizeof *buf);
    if (!am || !buf) return NULL;
    for (size_t o = 0; K > 0 && o < outer; o++) /* k = 0: nothing to pick */
        for (size_t c = 0; c < inner; c++) {
            size_t m = 0; /* items in buf, sorted, at most K (insertion) */
            for (size_t j = 0; j < N; j++) {
                topk_item it = {nb_get(x, (o * N + j) * inner + c), (int64_t)j};
                if (K > TOPK_INSERT_MAX) {
                    buf[m++] = it;
                    continue;
                }
                if (m == K && !topk_before(it, buf[m - 1])) continue;
                size_t at = m < K ? m++ : m - 1;
                while (at > 0 && topk_before(it, buf[at - 1])) { /* shift the smaller down */
                    buf[at] = buf[at - 1];
                    at--;
                }
                buf[at] = it;
            }
            if (K > TOPK_INSERT_MAX) qsort(buf, N, sizeof *buf, topk_cmp);
            for (size_t j = 0; j < K; j++) {
                size_t q = (o * K + j) * inner + c;
                nb_set(out, q, buf[j].v);
                am[q] = buf[j].i;
            }
        }
    nb_ctx_give_back(ctx, buf, (N + 1) * sizeof *buf);
    if (indices) {
        *indices = nb_from_data(ctx, NB_I64, out->ndim, out->shape, am);
        if (!*indices) return NULL;
    }
    nb_node *nd = nb_record_op(ctx, NB_OP_TOPK, out, 1, &x, topk_backward);
    if (nd) {
        nd->i[0] = d;
        nd->i[1] = k;
        nd->saved = am;
    }
    return out;
}

/* Flat position in x of out's element q, for the saved arg list am. */
static size_t topk_source(const nb_node *nd, size_t q) {
    const nb_tensor *x = nd->in[0];
    int d = (int)nd->i[0];
    size_t K = (size_t)nd->i[1], N = x->ndim ? (size_t)x->shape[d] : 1, inner = 1;
    for (int i = d + 1; i < x->ndim; i++) inner *= (size_t)x->shape[i];
    size_t c = q % inner, o = q / inner / K;
    return (o * N + (size_t)((const int64_t *)nd->saved)[q]) * inner + c;
}

static void topk_backward(nb_ctx *ctx, nb_node *nd) {
    nb_tensor *x = nd->in[0], *out = nd->out;
    void *gx = nb_grad_buffer(ctx, x);
    if (!gx) return;
#define K_(T)                                                                     \
    {                                                                             \
        T *dx = gx;                                                               \
        const T *g = out->grad;                                                   \
        for (size_t q = 0; q < out->numel; q++) dx[topk_source(nd, q)] += g[q];   \
    }
    NB_DISPATCH(x->dtype, K_);
#undef K_
}

/* topk: dout scattered to the chosen positions, as an index_add into x
 * flattened to (numel, 1) (recorded, so differentiable again). */
void nb_graph_backward_topk(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0];
    int64_t Q = (int64_t)n->out->numel;
    nb_tensor *pos = nb_empty(ctx, NB_I64, 1, (const int64_t[]){Q});
    nb_tensor *base = nb_zeros(ctx, x->dtype, NB_SHAPE((int64_t)x->numel, 1));
    if (!pos || !base) return;
    int64_t *p = pos->data;
    for (int64_t q = 0; q < Q; q++) p[q] = (int64_t)topk_source(n, (size_t)q);
    nb_tensor *flat = nb_index_add(ctx, base, pos, nb_reshape(ctx, dout, NB_SHAPE(Q, 1)));
    din[0] = nb_reshape(ctx, flat, x->ndim, x->shape);
}

/* ==========================================================================
 * index_select: x (N, ...) rows picked by idx (M) -> out (M, ...), PyTorch's
 * x.index_select(0, idx). idx is not differentiable: the node's only input
 * is x. Rows are D = numel / N elements.
 * Backward: dx row idx[p] += dout row p (repeated ids add up).
 * ========================================================================== */

static void index_select_backward(nb_ctx *ctx, nb_node *n); /* below */

nb_tensor *nb_index_select(nb_ctx *ctx, nb_tensor *x, const nb_tensor *idx) {
    const char *op = nb_op_name(NB_OP_INDEX_SELECT);
    if (!nb_check_float_inputs(ctx, op, 1, &x)) return NULL;
    char s[64];
    if (x->ndim < 1) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has 0 dims, expected at least 1 (rows)", op,
                    nb_shape_str(x, s, sizeof s));
        return NULL;
    }
    if (!check_ids(ctx, op, idx, "x", x)) return NULL;
    int64_t shape[NB_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) shape[i] = i ? x->shape[i] : idx->shape[0];
    nb_tensor *out = nb_empty(ctx, x->dtype, x->ndim, shape);
    if (!out) return NULL;
    size_t M = idx->numel, D = row_len(x);
    gather(x->dtype, out->data, x->data, idx->data, M, D, false);
    nb_node *n = nb_record_op(ctx, NB_OP_INDEX_SELECT, out, 1, &x, index_select_backward);
    if (n) {
        n->saved = save_ids(ctx, idx->data, M);
        if (!n->saved) return NULL;
        n->i[2] = (int64_t)M;
    }
    return out;
}

static void index_select_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = n->in[0];
    void *gx = nb_grad_buffer(ctx, x);
    if (!gx) return;
    scatter_add_rows(x->dtype, gx, n->out->grad, n->saved, (size_t)n->i[2], row_len(x));
}

/* index_select: dx = index_add(zeros like x, idx, dout) */
void nb_graph_backward_index_select(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *x = n->in[0];
    din[0] = nb_index_add(ctx, nb_zeros(ctx, x->dtype, x->ndim, x->shape), saved_ids(ctx, n),
                          dout);
}

/* ==========================================================================
 * index_add: out = base (N, ...) with src (M, ...) row p added to row
 * idx[p], p in order: PyTorch's base.index_add(0, idx, src) (not in place).
 * The node's inputs are base and src; idx is not differentiable.
 * Backward: dbase = dout; dsrc row p = dout row idx[p].
 * ========================================================================== */

static void index_add_backward(nb_ctx *ctx, nb_node *n); /* below */

nb_tensor *nb_index_add(nb_ctx *ctx, nb_tensor *base, const nb_tensor *idx, nb_tensor *src) {
    const char *op = nb_op_name(NB_OP_INDEX_ADD);
    static const char *const names[2] = {"base", "src"};
    static const bool optional[2] = {false, false};
    nb_tensor *in[2] = {base, src};
    if (!nb_check_named_inputs(ctx, op, 2, in, names, optional)) return NULL;
    char sb[64], ss[64];
    bool fits = base->ndim >= 1 && src->ndim == base->ndim;
    for (int i = 1; fits && i < base->ndim; i++) fits = src->shape[i] == base->shape[i];
    if (!fits) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: src %s does not fit base %s: expected (M, ...) rows "
                    "of base's row shape (N, ...), at least 1 dim", op,
                    nb_shape_str(src, ss, sizeof ss), nb_shape_str(base, sb, sizeof sb));
        return NULL;
    }
    if (!check_ids(ctx, op, idx, "base", base)) return NULL;
    if (idx->shape[0] != src->shape[0]) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: idx has %lld ids but src %s has %lld rows, expected "
                    "one id per row", op, (long long)idx->shape[0],
                    nb_shape_str(src, ss, sizeof ss), (long long)src->shape[0]);
        return NULL;
    }
    nb_tensor *out = nb_empty(ctx, base->dtype, base->ndim, base->shape);
    if (!out) return NULL;
    size_t M = idx->numel, D = row_len(base);
    if (base->numel) memcpy(out->data, base->data, base->numel * nb_dtype_size(base->dtype));
    scatter_add_rows(base->dtype, out->data, src->data, idx->data, M, D);
    nb_node *n = nb_record_op(ctx, NB_OP_INDEX_ADD, out, 2, in, index_add_backward);
    if (n) {
        n->saved = save_ids(ctx, idx->data, M);
        if (!n->saved) return NULL;
        n->i[2] = (int64_t)M;
    }
    return out;
}

static void index_add_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *base = n->in[0], *src = n->in[1], *out = n->out;
    size_t D = row_len(base);
    void *gb = nb_grad_buffer(ctx, base); /* written before src's buffer is asked for */
    if (gb) {
#define K_(T)                                                                     \
    {                                                                             \
        T *db = gb;                                                               \
        const T *g = out->grad;                                                   \
        for (size_t i = 0; i < base->numel; i++) db[i] += g[i];                   \
    }
        NB_DISPATCH(base->dtype, K_);
#undef K_
    }
    void *gs = nb_grad_buffer(ctx, src);
    if (gs) gather(src->dtype, gs, out->grad, n->saved, (size_t)n->i[2], D, true);
}

/* index_add: dbase = dout, dsrc = index_select(dout, idx) */
void nb_graph_backward_index_add(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    if (n->in[0]->requires_grad) din[0] = dout;
    if (n->in[1]->requires_grad) din[1] = nb_index_select(ctx, dout, saved_ids(ctx, n));
}

/* ---- forward-mode rules: topk and index_select gather the tangent where
 * they gathered x; index_add scatters the source's tangent into the base's */
nb_tensor *nb_forward_topk(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    int64_t Q = (int64_t)n->out->numel;
    nb_tensor *pos = nb_empty(ctx, NB_I64, 1, (const int64_t[]){Q});
    if (!pos) return NULL;
    int64_t *p = pos->data;
    for (int64_t q = 0; q < Q; q++) p[q] = (int64_t)topk_source(n, (size_t)q);
    nb_tensor *flat = nb_reshape(ctx, tin[0], NB_SHAPE((int64_t)tin[0]->numel, 1));
    return nb_reshape(ctx, nb_index_select(ctx, flat, pos), n->out->ndim, n->out->shape);
}

nb_tensor *nb_forward_index_select(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return tin[0] ? nb_index_select(ctx, tin[0], saved_ids(ctx, n)) : NULL;
}

nb_tensor *nb_forward_index_add(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[1]) return tin[0];
    return nb_index_add(ctx, nb_fwd_or_zeros(ctx, tin[0], n->in[0]), saved_ids(ctx, n), tin[1]);
}
