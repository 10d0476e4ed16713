/* ops/shape.c - transpose, permute, reshape, contiguous, concat, split.
 *
 * nabla tensors are always contiguous, so transpose and permute copy; one
 * strided copy serves both, and its backward is the same copy through the
 * inverse permutation. reshape is a true view (it shares the data); concat
 * and split copy slabs along one dim. */
#include "ops/ops_internal.h"

/* ---- the strided copy behind permute and transpose ------------------------------ */

/* dst's shape and src's strides padded on the left to NB_MAX_DIMS dims; a
 * row is the last dim, PC_R the index of the last dim. */
#define PC_R (NB_MAX_DIMS - 1)
typedef struct pc_job {
    nb_dtype dt;
    void *dst;
    const void *src;
    int64_t os[NB_MAX_DIMS], ss[NB_MAX_DIMS]; /* dst's shape and src's stride for each of its dims */
    int lead;                                 /* the first dim of dst that is not 1 (or PC_R) */
    bool add;
} pc_job;

/* Rows [lo, hi) of dst (each os[PC_R] long). */
static void permute_rows(void *arg, int64_t lo, int64_t hi) {
    const pc_job *j = arg;
    const int64_t *os = j->os, *ss = j->ss, n = os[PC_R], sn = ss[PC_R];
#define K(T)                                                                       \
    {                                                                              \
        const T *x = j->src;                                                       \
        for (int64_t r = lo; r < hi; r++) {                                        \
            int64_t off = 0, q = r;                                                \
            for (int d = PC_R - 1; d >= j->lead; d--) {                            \
                off += q % os[d] * ss[d];                                          \
                q /= os[d];                                                        \
            }                                                                      \
            T *y = (T *)j->dst + r * n;                                            \
            const T *xr = x + off;                                                 \
            if (j->add)                                                            \
                for (int64_t i = 0; i < n; i++) y[i] += xr[i * sn];                \
            else if (sn == 1) /* the last dim stays last: whole rows */            \
                memcpy(y, xr, (size_t)n * sizeof(T));                              \
            else                                                                   \
                for (int64_t i = 0; i < n; i++) y[i] = xr[i * sn];                 \
        }                                                                          \
    }
    NB_DISPATCH(j->dt, K);
#undef K
}

/* dst (shape[perm[0]], ..., shape[perm[nd-1]]) = src (shape) permuted:
 * dst[i0, i1, ...] = src[...] with src's dim perm[d] indexed by i_d.
 * With `add`, dst += instead of =. dst is written in row-major order, so
 * its stores are contiguous; src is read with the permuted strides. */
static void permute_copy(nb_dtype dt, void *dst, const void *src, int nd,
                         const int64_t *shape, const int64_t *perm, bool add) {
    int64_t sstride[NB_MAX_DIMS];
    int64_t s = 1;
    for (int d = nd - 1; d >= 0; d--) {
        sstride[d] = s;
        s *= shape[d];
    }
    pc_job j = {.dt = dt, .dst = dst, .src = src, .lead = PC_R, .add = add};
    for (int d = 0; d < NB_MAX_DIMS; d++) j.os[d] = 1, j.ss[d] = 0;
    /* padded on the left: os is dst's shape, ss src's stride for it */
    for (int d = 0; d < nd; d++) {
        j.os[NB_MAX_DIMS - nd + d] = shape[perm[d]];
        j.ss[NB_MAX_DIMS - nd + d] = sstride[perm[d]];
    }
    int64_t rows = 1;
    for (int d = 0; d < PC_R; d++) {
        rows *= j.os[d];
        if (j.os[d] != 1 && d < j.lead) j.lead = d;
    }
    int64_t n = j.os[PC_R];
    nb_parallel_for(rows, n > 0 && n < 16384 ? 16384 / n : 1, permute_rows, &j);
}

/* ---- permute / transpose: out = a with dims reordered ------------------------- */
/* a (s0, .., s_{n-1}) -> out (s_perm[0], ..., s_perm[n-1]); perm saved in
 * node->i. da += permute(dout, inverse perm): reuses only the perm. */
static void permute_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    void *da = nb_grad_buffer(ctx, a);
    if (!da) return;
    int64_t inv[NB_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) inv[n->i[d]] = d;
    permute_copy(a->dtype, da, out->grad, out->ndim, out->shape, inv, true);
}

/* Shared by permute and transpose once perm is validated (entries in 0..nd-1);
 * the perm goes in node->i (NB_MAX_DIMS entries). */
static nb_tensor *permute_op(nb_ctx *ctx, nb_op op, nb_tensor *a, const int64_t *perm) {
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) shape[d] = a->shape[perm[d]];
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, shape); /* permute_copy writes all */
    if (!out) return NULL;
    permute_copy(a->dtype, out->data, a->data, a->ndim, a->shape, perm, false);
    nb_node *n = nb_record_op(ctx, op, out, 1, &a, permute_backward);
    if (n)
        for (int d = 0; d < a->ndim; d++) n->i[d] = perm[d];
    return out;
}

nb_tensor *nb_permute(nb_ctx *ctx, nb_tensor *a, const int *perm) {
    if (!nb_check_float_inputs(ctx, "permute", 1, &a)) return NULL;
    if (!perm) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "permute: perm is NULL");
        return NULL;
    }
    int64_t p[NB_MAX_DIMS];
    bool seen[NB_MAX_DIMS] = {false};
    for (int d = 0; d < a->ndim; d++) {
        int v = perm[d] < 0 ? perm[d] + a->ndim : perm[d];
        if (v < 0 || v >= a->ndim || seen[v]) {
            char s[64], ps[64];
            int64_t given[NB_MAX_DIMS];
            for (int e = 0; e < a->ndim; e++) given[e] = perm[e];
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "permute: perm %s is not a permutation of the %d dims of %s, expected "
                        "each of 0..%d once",
                        nb_dims_str(a->ndim, given, "()", ps, sizeof ps), a->ndim,
                        nb_shape_str(a, s, sizeof s), a->ndim - 1);
            return NULL;
        }
        seen[v] = true;
        p[d] = v;
    }
    return permute_op(ctx, NB_OP_PERMUTE, a, p);
}

static void permute_graph_backward(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    int inv[NB_MAX_DIMS];
    for (int d = 0; d < n->in[0]->ndim; d++) inv[n->i[d]] = d;
    din[0] = nb_permute(ctx, dout, inv);
}

void nb_graph_backward_permute(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    permute_graph_backward(ctx, n, dout, din);
}

nb_tensor *nb_transpose(nb_ctx *ctx, nb_tensor *a, int dim0, int dim1) {
    if (!nb_check_float_inputs(ctx, "transpose", 1, &a)) return NULL;
    int d0 = nb_norm_dim(ctx, "transpose", a, dim0);
    int d1 = d0 < 0 ? -1 : nb_norm_dim(ctx, "transpose", a, dim1);
    if (d1 < 0) return NULL;
    int64_t p[NB_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) p[d] = d;
    p[d0] = d1;
    p[d1] = d0;
    return permute_op(ctx, NB_OP_TRANSPOSE, a, p);
}

void nb_graph_backward_transpose(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    permute_graph_backward(ctx, n, dout, din);
}

/* ---- reshape: a view; contiguous: a copy --------------------------------------------- */
/* Both have out.numel == a.numel in the same order: da += dout elementwise.
 * Reuses nothing. */
static void same_order_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    if (nb_grad_take(ctx, a, out)) return;
    bool fresh;
    void *da = nb_grad_buffer_fresh(ctx, a, &fresh);
    if (da && fresh) nb_copy_par(da, out->grad, a->numel * nb_dtype_size(a->dtype));
    else if (da) nb_accumulate(a->dtype, da, out->grad, a->numel);
}

nb_tensor *nb_reshape(nb_ctx *ctx, nb_tensor *a, int ndim, const int64_t *shape) {
    if (!nb_check_float_inputs(ctx, "reshape", 1, &a)) return NULL;
    if (ndim < 0 || ndim > NB_MAX_DIMS) {
        nb_ctx_fail(ctx, NB_ERR_SIZE, "reshape: %d dims requested, expected 0..%d", ndim,
                    NB_MAX_DIMS);
        return NULL;
    }
    if (ndim > 0 && !shape) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "reshape: shape is NULL for %d dims", ndim);
        return NULL;
    }
    char s[64], want[64];
    int64_t sh[NB_MAX_DIMS];
    int infer = -1;
    size_t known = 1;      /* product of the given sizes while it is <= a->numel */
    bool too_big = false;  /* ... and whether it went past */
    bool zero = false;     /* a size is 0: the view is empty */
    for (int d = 0; d < ndim; d++) {
        sh[d] = shape[d];
        if (shape[d] == -1 && infer < 0) {
            infer = d;
        } else if (shape[d] == -1) {
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "reshape: shape %s has more than one -1, expected at most one size "
                        "to infer",
                        nb_dims_str(ndim, shape, "()", want, sizeof want));
            return NULL;
        } else if (shape[d] < 0) {
            nb_ctx_fail(ctx, NB_ERR_SIZE,
                        "reshape: shape %s has size %lld at dim %d, expected >= 0 or -1",
                        nb_dims_str(ndim, shape, "()", want, sizeof want), (long long)shape[d], d);
            return NULL;
        } else if (shape[d] == 0) {
            zero = true;
        } else if (!too_big) {
            if ((uint64_t)shape[d] > a->numel / known)
                too_big = true;
            else
                known *= (size_t)shape[d];
        }
    }
    if (zero) { /* as PyTorch: an empty view of an empty tensor, and no -1 to infer */
        if (infer >= 0 || a->numel != 0) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "reshape: cannot view %s (%zu elements) as %s, %s", nb_shape_str(a, s, sizeof s),
                        a->numel, nb_dims_str(ndim, shape, "()", want, sizeof want),
                        infer >= 0 ? "whose -1 could be any size" : "which has 0 elements");
            return NULL;
        }
    } else if (infer >= 0 && a->numel == 0) {
        sh[infer] = 0; /* an empty tensor: the -1 takes the 0 */
    } else if (infer >= 0) {
        if (too_big || a->numel % known != 0) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "reshape: cannot view %s (%zu elements) as %s, expected the sizes "
                        "other than -1 to divide %zu",
                        nb_shape_str(a, s, sizeof s), a->numel,
                        nb_dims_str(ndim, shape, "()", want, sizeof want), a->numel);
            return NULL;
        }
        sh[infer] = (int64_t)(a->numel / known);
    } else if (too_big || known != a->numel) {
        double count = 1; /* for the message only: cannot overflow */
        for (int d = 0; d < ndim; d++) count *= (double)shape[d];
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "reshape: cannot view %s (%zu elements) as %s (%.0f elements)",
                    nb_shape_str(a, s, sizeof s), a->numel,
                    nb_dims_str(ndim, shape, "()", want, sizeof want), count);
        return NULL;
    }
    nb_tensor *out = nb_view_of(ctx, a, ndim, sh);
    if (!out) return NULL;
    nb_record_op(ctx, NB_OP_RESHAPE, out, 1, &a, same_order_backward);
    return out;
}

void nb_graph_backward_reshape(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    din[0] = nb_reshape(ctx, dout, n->in[0]->ndim, n->in[0]->shape);
}

nb_tensor *nb_contiguous(nb_ctx *ctx, nb_tensor *a) {
    if (!nb_check_float_inputs(ctx, "contiguous", 1, &a)) return NULL;
    nb_tensor *out = nb_empty(ctx, a->dtype, a->ndim, a->shape);
    if (!out) return NULL;
    memcpy(out->data, a->data, a->numel * nb_dtype_size(a->dtype));
    nb_record_op(ctx, NB_OP_CONTIGUOUS, out, 1, &a, same_order_backward);
    return out;
}

void nb_graph_backward_contiguous(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    NB_UNUSED(ctx), NB_UNUSED(n);
    din[0] = dout;
}

/* ---- slabs along one dim (concat and split) ------------------------------------------- */
/* A tensor seen as (outer, size along dim, inner): `outer` slabs, each of
 * dim_size * inner contiguous elements. */
static void slab_dims(const nb_tensor *t, int dim, int64_t *outer, int64_t *inner) {
    *outer = 1;
    *inner = 1;
    for (int d = 0; d < dim; d++) *outer *= t->shape[d];
    for (int d = dim + 1; d < t->ndim; d++) *inner *= t->shape[d];
}

/* For each of `outer` slabs o: len elements from src (slabs src_len apart,
 * starting at src_off) to dst (slabs dst_len apart, from dst_off); with
 * `add`, dst += src instead of dst = src. */
static void slab_copy(nb_dtype dt, int64_t outer, int64_t len, void *dst, int64_t dst_len,
                      int64_t dst_off, const void *src, int64_t src_len, int64_t src_off,
                      bool add) {
    size_t es = nb_dtype_size(dt);
    for (int64_t o = 0; o < outer; o++) {
        char *y = (char *)dst + (size_t)(o * dst_len + dst_off) * es;
        const char *x = (const char *)src + (size_t)(o * src_len + src_off) * es;
        if (add)
            nb_accumulate(dt, y, x, (size_t)len);
        else
            memcpy(y, x, (size_t)len * es);
    }
}

/* ---- concat: out = [t0, t1, ...] along dim ------------------------------------------- */
/* t_i (..., d_i, ...) -> out (..., sum d_i, ...); dim saved in node->i[0].
 * dt_i += the slab of dout at t_i's offset. Reuses only the shapes. */
static void concat_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *out = n->out;
    int dim = (int)n->i[0];
    int64_t outer, inner, off = 0;
    slab_dims(out, dim, &outer, &inner);
    for (int i = 0; i < n->n_in; i++) {
        nb_tensor *t = n->in[i];
        int64_t len = t->shape[dim] * inner;
        void *dt = nb_grad_buffer(ctx, t);
        if (dt)
            slab_copy(out->dtype, outer, len, dt, len, 0, out->grad, out->shape[dim] * inner, off,
                      true);
        off += len;
    }
}

nb_tensor *nb_concat(nb_ctx *ctx, int n, nb_tensor *const *ts, int dim) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!ts || n < 1) {
        nb_ctx_fail(ctx, !ts ? NB_ERR_NULL : NB_ERR_VALUE,
                    "concat: %s, expected an array of n >= 1 tensors",
                    !ts ? "the tensor array is NULL" : "n < 1");
        return NULL;
    }
    if (!nb_check_float_inputs(ctx, "concat", n, ts)) return NULL;
    int d = nb_norm_dim(ctx, "concat", ts[0], dim);
    if (d < 0) return NULL;
    int64_t shape[NB_MAX_DIMS];
    for (int e = 0; e < ts[0]->ndim; e++) shape[e] = ts[0]->shape[e];
    for (int i = 1; i < n; i++) {
        const nb_tensor *t = ts[i];
        char s0[64], s[64];
        if (t->ndim != ts[0]->ndim) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "concat: input %d %s has %d dims but input 1 %s has %d, expected the "
                        "same number",
                        i + 1, nb_shape_str(t, s, sizeof s), t->ndim,
                        nb_shape_str(ts[0], s0, sizeof s0), ts[0]->ndim);
            return NULL;
        }
        for (int e = 0; e < t->ndim; e++) {
            if (e != d && t->shape[e] != ts[0]->shape[e]) {
                nb_ctx_fail(ctx, NB_ERR_SHAPE,
                            "concat: input %d %s does not match input 1 %s at dim %d (%lld vs "
                            "%lld), expected equal sizes except along dim %d",
                            i + 1, nb_shape_str(t, s, sizeof s),
                            nb_shape_str(ts[0], s0, sizeof s0), e, (long long)t->shape[e],
                            (long long)ts[0]->shape[e], d);
                return NULL;
            }
        }
        shape[d] += t->shape[d];
    }
    nb_tensor *out = nb_empty(ctx, ts[0]->dtype, ts[0]->ndim, shape); /* the slabs tile it */
    if (!out) return NULL;
    int64_t outer, inner, off = 0;
    slab_dims(out, d, &outer, &inner);
    for (int i = 0; i < n; i++) {
        int64_t len = ts[i]->shape[d] * inner;
        slab_copy(out->dtype, outer, len, out->data, shape[d] * inner, off, ts[i]->data, len, 0,
                  false);
        off += len;
    }
    nb_node *node = nb_record_op(ctx, NB_OP_CONCAT, out, n, ts, concat_backward);
    if (node) node->i[0] = d;
    return out;
}

/* concat: each input gets its piece of dout (split at the inputs' sizes). */
void nb_graph_backward_concat(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    int dim = (int)n->i[0];
    int64_t *sizes = nb_ctx_alloc(ctx, (size_t)n->n_in * sizeof *sizes);
    if (!sizes) return;
    for (int i = 0; i < n->n_in; i++) sizes[i] = n->in[i]->shape[dim];
    nb_split(ctx, dout, dim, n->n_in, sizes, din);
}

/* ---- split: out_j = the j-th piece of a along dim ------------------------------------ */
/* a (..., sum s_j, ...) -> out_j (..., s_j, ...), each its own node with
 * dim in node->i[0] and the piece's offset along dim in node->i[1].
 * da's slab at that offset += dout_j. Reuses only the offset. */
static void split_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *a = n->in[0], *out = n->out;
    void *da = nb_grad_buffer(ctx, a);
    if (!da) return;
    int dim = (int)n->i[0];
    int64_t outer, inner;
    slab_dims(a, dim, &outer, &inner);
    int64_t len = out->shape[dim] * inner;
    slab_copy(a->dtype, outer, len, da, a->shape[dim] * inner, n->i[1] * inner, out->grad, len,
              0, true);
}

nb_status nb_split(nb_ctx *ctx, nb_tensor *a, int dim, int n, const int64_t *sizes,
                   nb_tensor **out) {
    if (out && n > 0)
        for (int j = 0; j < n; j++) out[j] = NULL;
    if (!nb_check_float_inputs(ctx, "split", 1, &a)) return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    if (!sizes || !out || n < 1)
        return nb_ctx_fail(ctx, n < 1 ? NB_ERR_VALUE : NB_ERR_NULL,
                           "split: %s, expected n >= 1 sizes and outputs",
                           n < 1 ? "n < 1" : !sizes ? "sizes is NULL" : "out is NULL");
    int d = nb_norm_dim(ctx, "split", a, dim);
    if (d < 0) return nb_ctx_status(ctx);
    char s[64], ss[96];
    int64_t total = 0;
    bool ok = true;
    for (int j = 0; j < n; j++) {
        if (sizes[j] < 0 || sizes[j] > a->shape[d]) ok = false;
        else total += sizes[j];
    }
    if (!ok || total != a->shape[d]) {
        int shown = n < 8 ? n : 8; /* the message shows the first sizes */
        nb_dims_str(shown, sizes, "()", ss, sizeof ss);
        return nb_ctx_fail(ctx, NB_ERR_SHAPE,
                           "split: sizes %s%s do not add up to %lld (dim %d of %s), expected "
                           "sizes >= 0 with that sum",
                           ss, n > shown ? " ..." : "", (long long)a->shape[d], d,
                           nb_shape_str(a, s, sizeof s));
    }
    int64_t outer, inner, off = 0;
    slab_dims(a, d, &outer, &inner);
    int64_t shape[NB_MAX_DIMS];
    for (int e = 0; e < a->ndim; e++) shape[e] = a->shape[e];
    for (int j = 0; j < n; j++) {
        shape[d] = sizes[j];
        nb_tensor *t = nb_empty(ctx, a->dtype, a->ndim, shape); /* one slab copy fills it */
        if (!t) {
            for (int i = 0; i < j; i++) out[i] = NULL;
            return nb_ctx_status(ctx);
        }
        int64_t len = sizes[j] * inner;
        slab_copy(a->dtype, outer, len, t->data, len, 0, a->data, a->shape[d] * inner,
                  off * inner, false);
        nb_node *node = nb_record_op(ctx, NB_OP_SPLIT, t, 1, &a, split_backward);
        if (node) {
            node->i[0] = d;
            node->i[1] = off;
        }
        out[j] = t;
        off += sizes[j];
    }
    return NB_OK;
}

/* split: the piece's gradient padded with zeros to the input's size. */
void nb_graph_backward_split(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0];
    int dim = (int)n->i[0];
    int64_t before = n->i[1], after = a->shape[dim] - before - dout->shape[dim];
    nb_tensor *parts[3];
    int k = 0;
    int64_t shape[NB_MAX_DIMS];
    for (int d = 0; d < a->ndim; d++) shape[d] = a->shape[d];
    if (before > 0) {
        shape[dim] = before;
        parts[k++] = nb_zeros(ctx, a->dtype, a->ndim, shape);
    }
    parts[k++] = dout;
    if (after > 0) {
        shape[dim] = after;
        parts[k++] = nb_zeros(ctx, a->dtype, a->ndim, shape);
    }
    din[0] = k == 1 ? dout : nb_concat(ctx, k, parts, dim);
}

/* ---- forward-mode rules: every op here moves elements, so each does the
 * same to the tangents (concat fills a missing tangent with zeros). */
nb_tensor *nb_forward_permute(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    int perm[NB_MAX_DIMS];
    for (int d = 0; d < n->in[0]->ndim; d++) perm[d] = (int)n->i[d];
    return nb_permute(ctx, tin[0], perm);
}

nb_tensor *nb_forward_transpose(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return nb_forward_permute(ctx, n, tin);
}

nb_tensor *nb_forward_reshape(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    return tin[0] ? nb_reshape(ctx, tin[0], n->out->ndim, n->out->shape) : NULL;
}

nb_tensor *nb_forward_contiguous(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    NB_UNUSED(ctx), NB_UNUSED(n);
    return tin[0];
}

nb_tensor *nb_forward_concat(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    nb_tensor **t = nb_ctx_alloc(ctx, (size_t)n->n_in * sizeof *t);
    if (!t) return NULL;
    for (int i = 0; i < n->n_in; i++)
        if (!(t[i] = nb_fwd_or_zeros(ctx, tin[i], n->in[i]))) return NULL;
    return nb_concat(ctx, n->n_in, t, (int)n->i[0]);
}

/* split: the tangent's piece at the same offset along the same dim */
nb_tensor *nb_forward_split(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (!tin[0]) return NULL;
    int dim = (int)n->i[0];
    int64_t size = n->out->shape[dim];
    int64_t sizes[3] = {n->i[1], size, n->in[0]->shape[dim] - n->i[1] - size};
    nb_tensor *parts[3] = {NULL};
    if (nb_split(ctx, tin[0], dim, 3, sizes, parts)) return NULL;
    return parts[1];
}
