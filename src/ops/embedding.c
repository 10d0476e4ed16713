/* ops/embedding.c - embedding: rows of a weight picked by ids, forward
 * then backward. */
#include "ops/ops_internal.h"

/* ==========================================================================
 * embedding: y (ids.shape..., D) = weight (N, D) rows picked by ids (I64).
 * ids is not differentiable: the node's only input is weight. The forward
 * copies ids (P = ids.numel values) into the arena (node->saved, P in
 * node->i[0]), so the caller may change or free its ids before backward.
 * ========================================================================== */

/* Writes "[i, j, k]" (the multi-index of flat position p in t) into buf. */
static void index_str(const nb_tensor *t, size_t p, char *buf, size_t n) {
    int64_t idx[NB_MAX_DIMS];
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = (int64_t)(p % (size_t)t->shape[d]);
        p /= (size_t)t->shape[d];
    }
    nb_dims_str(t->ndim, idx, "[]", buf, n);
}

static void embedding_backward(nb_ctx *ctx, nb_node *n); /* below, after the forward */

/* Checks embedding's arguments, every id against weight's rows included;
 * false with the error on ctx. */
static bool embedding_check(nb_ctx *ctx, const char *op, nb_tensor *weight,
                            const nb_tensor *ids) {
    static const char *const names[1] = {"weight"};
    static const bool optional[1] = {false};
    if (!nb_check_named_inputs(ctx, op, 1, &weight, names, optional)) return false;
    char sw[64], si[64];
    if (!ids) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: ids is NULL", op);
        return false;
    }
    if (!nb_check_live(ctx, op, 1, &ids)) return false;
    if (weight->ndim != 2) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "%s: weight %s has %d dims, expected 2 (num_embeddings, embedding_dim)", op,
                    nb_shape_str(weight, sw, sizeof sw), weight->ndim);
        return false;
    }
    if (ids->dtype != NB_I64) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: ids %s are %s, expected i64", op,
                    nb_shape_str(ids, si, sizeof si), nb_dtype_name(ids->dtype));
        return false;
    }
    if (ids->ndim > NB_MAX_DIMS - 1) {
        nb_ctx_fail(ctx, NB_ERR_SIZE,
                    "%s: ids %s have %d dims, expected at most %d (the result adds one)", op,
                    nb_shape_str(ids, si, sizeof si), ids->ndim, NB_MAX_DIMS - 1);
        return false;
    }
    const int64_t *id = ids->data;
    int64_t num = weight->shape[0];
    for (size_t p = 0; p < ids->numel; p++) {
        if (id[p] < 0 || id[p] >= num) {
            char pos[64];
            index_str(ids, p, pos, sizeof pos);
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: ids%s = %lld is out of range for weight %s: expected 0 <= id < %lld",
                        op, pos, (long long)id[p], nb_shape_str(weight, sw, sizeof sw),
                        (long long)num);
            return false;
        }
    }
    return true;
}

nb_tensor *nb_embedding(nb_ctx *ctx, nb_tensor *weight, const nb_tensor *ids) {
    if (!embedding_check(ctx, nb_op_name(NB_OP_EMBEDDING), weight, ids)) return NULL;
    const int64_t *id = ids->data;
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < ids->ndim; d++) shape[d] = ids->shape[d];
    shape[ids->ndim] = weight->shape[1];
    nb_tensor *out = nb_empty(ctx, weight->dtype, ids->ndim + 1, shape); /* rows copied in */
    if (!out) return NULL;
    size_t row = (size_t)weight->shape[1] * nb_dtype_size(weight->dtype);
    for (size_t p = 0; p < ids->numel; p++)
        memcpy((char *)out->data + p * row, (const char *)weight->data + (size_t)id[p] * row, row);
    nb_node *n = nb_record_op(ctx, NB_OP_EMBEDDING, out, 1, &weight, embedding_backward);
    if (n) {
        n->saved = nb_ctx_alloc_raw(ctx, ids->numel * sizeof(int64_t));
        if (!n->saved) return NULL;
        memcpy(n->saved, id, ids->numel * sizeof(int64_t));
        n->i[0] = (int64_t)ids->numel;
    }
    return out;
}

/* ---- backward ----------------------------------------------------------------------------- */

/* dweight[ids[p]] += dy[p] for every position p (repeated ids add up);
 * reuses the saved copy of ids, checked again against weight's rows. */
static void embedding_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *w = n->in[0], *out = n->out;
    const int64_t *ids = n->saved;
    size_t P = (size_t)n->i[0], D = (size_t)w->shape[1];
    for (size_t p = 0; p < P; p++)
        if (ids[p] < 0 || ids[p] >= w->shape[0]) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s backward: saved id %lld at position %zu is out "
                        "of range for %lld rows (corrupted saved state)", n->name,
                        (long long)ids[p], p, (long long)w->shape[0]);
            return;
        }
    void *gw = nb_grad_buffer(ctx, w);
    if (!gw) return;
#define K_(T)                                                                             \
    {                                                                                     \
        T *dw = gw;                                                                       \
        const T *g = out->grad;                                                           \
        for (size_t p = 0; p < P; p++) {                                                  \
            T *d = dw + (size_t)ids[p] * D;                                               \
            const T *gp = g + p * D;                                                      \
            for (size_t k = 0; k < D; k++) d[k] += gp[k];                                 \
        }                                                                                 \
    }
    NB_DISPATCH(out->dtype, K_);
#undef K_
}

/* ---- graph backward: dweight = onehot(ids)^T @ dout, the one-hot (P, N) a
 * constant from the saved ids: the scatter-add as a recorded product ------ */
void nb_graph_backward_embedding(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *w = n->in[0];
    const int64_t *ids = n->saved;
    int64_t P = n->i[0], N = w->shape[0], D = w->shape[1];
    nb_tensor *hot = nb_zeros(ctx, w->dtype, NB_SHAPE(N, P));
    if (!hot) return;
    for (int64_t p = 0; p < P; p++) nb_set(hot, (size_t)(ids[p] * P + p), 1.0);
    din[0] = nb_matmul(ctx, hot, nb_reshape(ctx, dout, NB_SHAPE(P, D)));
}

/* forward mode: the rows of the weight's tangent at the same ids */
nb_tensor *nb_forward_embedding(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    nb_tensor *ids = nb_from_data(ctx, NB_I64, n->out->ndim - 1, n->out->shape, n->saved);
    return ids ? nb_embedding(ctx, tin[0], ids) : NULL;
}
