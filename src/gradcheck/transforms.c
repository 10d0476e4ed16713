/* gradcheck/transforms.c - Jacobians, Hessians and per-sample gradients of
 * an nb_gradcheck_fn (functorch's jacrev, jacfwd, hessian, vmap(grad)),
 * built on nb_grad over one recorded run of f.
 *
 * Every transform runs f once on the caller's context and then asks the
 * tape for many products: reverse rows reuse the tape (PyTorch's
 * retain_graph), forward columns push tangents along it, and the Hessian's
 * rows reuse one recorded gradient. nabla has no batched
 * (vmapped) copy of a tape, so each basis vector is still its own walk;
 * what is shared is f's forward pass and, in the Hessian, the recorded
 * backward. */
#include "ops/ops_internal.h"

#include "nabla/gradcheck.h"
#include "nabla/ops.h"

#include <string.h>

static bool is_float(nb_dtype dt) { return dt == NB_F32 || dt == NB_F64; }

/* Checks the arguments every transform shares; res[0..n_res) are cleared
 * first. */
static bool check_inputs(nb_ctx *ctx, const char *op, nb_gradcheck_fn f, int n_in,
                         nb_tensor *const *inputs, nb_tensor **res, size_t n_res) {
    for (size_t i = 0; res && i < n_res; i++) res[i] = NULL;
    if (nb_ctx_status(ctx) != NB_OK) return false;
    if (!f || !inputs || !res) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: the function, the inputs and the results are required",
                    op);
        return false;
    }
    if (n_in < 1) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_in is %d, expected at least 1", op, n_in);
        return false;
    }
    for (int j = 0; j < n_in; j++) {
        if (!inputs[j]) {
            nb_ctx_fail(ctx, NB_ERR_NULL, "%s: input %d is NULL", op, j);
            return false;
        }
        if (!is_float(inputs[j]->dtype)) {
            nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: input %d is %s, expected f32 or f64", op, j,
                        nb_dtype_name(inputs[j]->dtype));
            return false;
        }
    }
    return true;
}

/* check_inputs, then binds f's inputs: xs[j] is inputs[j] when it requires
 * grad, else a copy of it, a leaf of ctx that does. */
static bool bind_inputs(nb_ctx *ctx, const char *op, nb_gradcheck_fn f, int n_in,
                        nb_tensor *const *inputs, nb_tensor **res, size_t n_res,
                        nb_tensor ***xs) {
    if (!check_inputs(ctx, op, f, n_in, inputs, res, n_res)) return false;
    nb_tensor **x = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *x);
    if (!x) return false;
    for (int j = 0; j < n_in; j++) {
        x[j] = inputs[j]->requires_grad
                   ? inputs[j]
                   : nb_requires_grad(nb_copy(ctx, inputs[j], inputs[j]->dtype));
        if (!x[j]) return false;
    }
    *xs = x;
    return true;
}

/* f(in) with recording on; NULL (and an error on ctx) when f fails or
 * returns something that is not a float tensor. */
static nb_tensor *run(nb_ctx *ctx, const char *op, nb_gradcheck_fn f, void *user,
                      nb_tensor *const *in) {
    bool was = nb_set_grad_enabled(ctx, true);
    nb_tensor *y = f(ctx, in, user);
    nb_set_grad_enabled(ctx, was);
    if (nb_ctx_status(ctx) != NB_OK) return NULL;
    if (!y) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: the function returned NULL", op);
        return NULL;
    }
    if (!is_float(y->dtype)) {
        nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: the function returned %s, expected f32 or f64", op,
                    nb_dtype_name(y->dtype));
        return NULL;
    }
    return y;
}

/* A zero tensor of a's shape followed by b's; NB_ERR_SIZE past NB_MAX_DIMS. */
static nb_tensor *zeros_cat(nb_ctx *ctx, const char *op, nb_dtype dt, const nb_tensor *a,
                            const nb_tensor *b) {
    if (a->ndim + b->ndim > NB_MAX_DIMS) {
        char s1[64], s2[64];
        nb_ctx_fail(ctx, NB_ERR_SIZE, "%s: %s ++ %s has more than %d dims", op,
                    nb_shape_str(a, s1, sizeof s1), nb_shape_str(b, s2, sizeof s2), NB_MAX_DIMS);
        return NULL;
    }
    int64_t shape[NB_MAX_DIMS];
    memcpy(shape, a->shape, (size_t)a->ndim * sizeof *shape);
    memcpy(shape + a->ndim, b->shape, (size_t)b->ndim * sizeof *shape);
    return nb_zeros(ctx, dt, a->ndim + b->ndim, shape);
}

/* One-hot of like's shape and dtype, 1 at flat index i. */
static nb_tensor *basis(nb_ctx *ctx, const nb_tensor *like, size_t i) {
    nb_tensor *e = nb_zeros(ctx, like->dtype, like->ndim, like->shape);
    if (e) nb_set(e, i, 1.0);
    return e;
}

/* Adds src's values (a tensor, or zeros when NULL) into dst's elements
 * off, off + step, ..., src->numel of them. */
static void put(nb_tensor *dst, const nb_tensor *src, size_t off, size_t step) {
    if (!src) return;
    if (step == 1 && src->dtype == dst->dtype) {
        size_t es = nb_dtype_size(src->dtype);
        memcpy((char *)dst->data + off * es, src->data, src->numel * es);
        return;
    }
    for (size_t k = 0; k < src->numel; k++) nb_set(dst, off + k * step, nb_get(src, k));
}

/* The recorded form of a transform's result: pieces[r] (each of `piece`'s
 * element count, or NULL for zeros) as the rows (by_row) or the columns of
 * an (n, piece) matrix, reshaped to out's shape. */
static nb_tensor *assemble(nb_ctx *ctx, nb_tensor **pieces, size_t n, size_t piece, bool by_row,
                           const nb_tensor *out) {
    int64_t rs[2] = {by_row ? 1 : (int64_t)piece, by_row ? (int64_t)piece : 1};
    for (size_t r = 0; r < n; r++)
        pieces[r] = pieces[r] ? nb_reshape(ctx, pieces[r], 2, rs) : nb_zeros(ctx, out->dtype, 2, rs);
    nb_tensor *m = nb_concat(ctx, (int)n, pieces, by_row ? 0 : 1);
    return nb_reshape(ctx, m, out->ndim, out->shape);
}

/* ---- nb_jacobian ---------------------------------------------------------- */
/* Reverse: row i of every jac[j] is nb_grad(y, x, e_i), all over one tape. */
static nb_status jac_rev(nb_ctx *ctx, nb_tensor *y, int n_in, nb_tensor **x, bool graph,
                         nb_tensor **jac) {
    size_t m = y->numel;
    nb_grad_opts o = {.create_graph = graph, .allow_unused = true};
    nb_tensor **g = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *g);
    nb_tensor **rows = graph ? nb_ctx_alloc(ctx, (size_t)n_in * m * sizeof *rows + 1) : NULL;
    nb_tensor *e = nb_zeros(ctx, y->dtype, y->ndim, y->shape);
    if (!g || (graph && !rows) || !e) return nb_ctx_status(ctx);
    for (size_t i = 0; i < m; i++) {
        /* with a graph the seed is recorded, so each row gets its own */
        nb_tensor *seed = graph ? basis(ctx, y, i) : e;
        if (!graph) nb_set(e, i, 1.0);
        if (!seed || nb_grad(ctx, 1, &y, &seed, n_in, x, &o, g)) return nb_ctx_status(ctx);
        if (!graph) nb_set(e, i, 0.0);
        for (int j = 0; j < n_in; j++) {
            if (graph)
                rows[(size_t)j * m + i] = g[j];
            else
                put(jac[j], g[j], i * x[j]->numel, 1);
        }
    }
    for (int j = 0; graph && j < n_in; j++) {
        nb_tensor *shape = jac[j];
        jac[j] = assemble(ctx, rows + (size_t)j * m, m, x[j]->numel, true, shape);
    }
    return nb_ctx_status(ctx);
}

/* Forward, for a tape with a custom op that has no forward-mode rule:
 * column k of jac[j] is J e_k, the gradient with respect to w of <g_j, e_k>
 * where g = J^T w was recorded once (the double-backward trick, its
 * recorded backward shared by every column). */
static nb_status jac_fwd_by_reverse(nb_ctx *ctx, nb_tensor *y, int n_in, nb_tensor **x,
                                    bool graph, nb_tensor **jac) {
    size_t m = y->numel;
    nb_tensor *w = nb_requires_grad(nb_zeros(ctx, y->dtype, y->ndim, y->shape));
    nb_tensor **g = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *g);
    nb_grad_opts cg = {.create_graph = true, .allow_unused = true};
    if (!w || !g || nb_grad(ctx, 1, &y, &w, n_in, x, &cg, g)) return nb_ctx_status(ctx);
    nb_grad_opts o = {.create_graph = graph, .allow_unused = true};
    for (int j = 0; j < n_in; j++) {
        size_t n = x[j]->numel;
        nb_tensor **cols = graph ? nb_ctx_alloc(ctx, n * sizeof *cols + 1) : NULL;
        if (graph && !cols) return nb_ctx_status(ctx);
        for (size_t k = 0; k < n; k++) {
            nb_tensor *col = NULL, *seed = NULL;
            if (g[j] && g[j]->requires_grad) {
                seed = basis(ctx, g[j], k);
                if (!seed || nb_grad(ctx, 1, &g[j], &seed, 1, &w, &o, &col))
                    return nb_ctx_status(ctx);
            }
            if (graph)
                cols[k] = col;
            else
                put(jac[j], col, k, n);
        }
        if (graph) jac[j] = assemble(ctx, cols, n, m, false, jac[j]);
    }
    return nb_ctx_status(ctx);
}

/* Forward: column k of jac[j] is J e_k, the tangent e_k of input j pushed
 * along f's recorded tape by the forward-mode rules (nb_fwd_push): f's
 * forward pass is shared by every column and nothing runs backward. */
static nb_status jac_fwd(nb_ctx *ctx, nb_tensor *y, int n_in, nb_tensor **x, bool graph,
                         nb_tensor **jac) {
    size_t m = y->numel;
    nb_tensor **v = nb_ctx_alloc(ctx, (size_t)n_in * sizeof *v);
    if (!v) return nb_ctx_status(ctx);
    for (int j = 0; j < n_in; j++) {
        size_t n = x[j]->numel;
        nb_tensor **cols = graph ? nb_ctx_alloc(ctx, n * sizeof *cols + 1) : NULL;
        if (graph && !cols) return nb_ctx_status(ctx);
        for (size_t k = 0; k < n; k++) {
            nb_tensor *col = NULL;
            v[j] = basis(ctx, x[j], k);
            int done = v[j] ? nb_fwd_push(ctx, n_in, x, v, 1, &y, graph, &col) : -1;
            v[j] = NULL;
            if (done < 0) return nb_ctx_status(ctx);
            if (done == 0) return jac_fwd_by_reverse(ctx, y, n_in, x, graph, jac);
            if (graph)
                cols[k] = col;
            else
                put(jac[j], col, k, n);
        }
        if (graph) jac[j] = assemble(ctx, cols, n, m, false, jac[j]);
    }
    return nb_ctx_status(ctx);
}

nb_status nb_jacobian(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                      nb_tensor *const *inputs, const nb_jacobian_opts *opts, nb_tensor **jac) {
    nb_tensor **x;
    if (!bind_inputs(ctx, "jacobian", f, n_in, inputs, jac, n_in > 0 ? (size_t)n_in : 0, &x))
        return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    nb_jacobian_opts o = opts ? *opts : (nb_jacobian_opts){NB_JAC_AUTO, false};
    if (o.mode != NB_JAC_AUTO && o.mode != NB_JAC_REV && o.mode != NB_JAC_FWD)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "jacobian: mode %d is not NB_JAC_AUTO, NB_JAC_REV "
                           "or NB_JAC_FWD", (int)o.mode);
    nb_tensor *y = run(ctx, "jacobian", f, user, x);
    if (!y) return nb_ctx_status(ctx);
    size_t n_total = 0;
    for (int j = 0; j < n_in; j++) {
        jac[j] = zeros_cat(ctx, "jacobian", x[j]->dtype, y, x[j]);
        if (!jac[j]) break;
        n_total += x[j]->numel;
    }
    nb_status st = nb_ctx_status(ctx);
    /* f does not depend on its inputs: the zeros are the answer */
    if (st == NB_OK && y->requires_grad && y->numel > 0 && n_total > 0) {
        bool fwd = o.mode == NB_JAC_FWD || (o.mode == NB_JAC_AUTO && n_total < y->numel);
        st = fwd ? jac_fwd(ctx, y, n_in, x, o.create_graph, jac)
                 : jac_rev(ctx, y, n_in, x, o.create_graph, jac);
    }
    for (int j = 0; st != NB_OK && j < n_in; j++) jac[j] = NULL;
    return st;
}

/* ---- nb_hessian ----------------------------------------------------------- */
nb_status nb_hessian(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                     nb_tensor *const *inputs, nb_tensor **hess) {
    size_t n_res = n_in > 0 ? (size_t)n_in * (size_t)n_in : 0;
    nb_tensor **x;
    if (!bind_inputs(ctx, "hessian", f, n_in, inputs, hess, n_res, &x))
        return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    nb_tensor *y = run(ctx, "hessian", f, user, x);
    if (!y) return nb_ctx_status(ctx);
    if (y->numel != 1) {
        char s[64];
        return nb_ctx_fail(ctx, NB_ERR_SHAPE, "hessian: the function returned %s, expected a "
                           "scalar (one element)", nb_shape_str(y, s, sizeof s));
    }
    for (size_t r = 0; r < n_res; r++) {
        hess[r] = zeros_cat(ctx, "hessian", x[r / n_in]->dtype, x[r / n_in], x[r % n_in]);
        if (!hess[r]) break;
    }
    nb_tensor **g = nb_ctx_alloc(ctx, 2 * (size_t)n_in * sizeof *g), **row = g + n_in;
    nb_grad_opts cg = {.create_graph = true, .allow_unused = true};
    nb_grad_opts o = {.allow_unused = true};
    if (g && nb_ctx_status(ctx) == NB_OK && y->requires_grad)
        nb_grad(ctx, 1, &y, NULL, n_in, x, &cg, g);
    for (int i = 0; g && nb_ctx_status(ctx) == NB_OK && y->requires_grad && i < n_in; i++) {
        /* g_i does not require grad when f is linear in x: those rows stay zero */
        for (size_t a = 0; g[i] && g[i]->requires_grad && a < x[i]->numel; a++) {
            nb_tensor *seed = basis(ctx, g[i], a);
            if (!seed || nb_grad(ctx, 1, &g[i], &seed, n_in, x, &o, row)) break;
            for (int j = 0; j < n_in; j++)
                put(hess[(size_t)i * n_in + j], row[j], a * x[j]->numel, 1);
        }
    }
    nb_status st = nb_ctx_status(ctx);
    for (size_t r = 0; st != NB_OK && r < n_res; r++) hess[r] = NULL;
    return st;
}

/* ---- nb_per_sample_grads -------------------------------------------------- */
/* How: every sample gets its own leaves for the parameters (views of
 * params' data, so nothing is copied, whose gradient buffers are that
 * sample's rows of grads), its loss is recorded on the one tape, and a
 * single backward of the summed losses leaves each sample's gradient in
 * its rows. The alternative, functorch's, is to run the loss once on the
 * whole batch with ops that take a leading batch dim on their weights (the
 * per-sample weight gradient of a linear then is one batched product of
 * its saved input and output gradient); that needs a batched form of every
 * op the loss uses, which nabla's ops do not have yet, so every op here
 * runs per sample (see docs/gradcheck.md). What is shared is the one
 * backward walk and the context's memory; nothing is copied but the data
 * samples. */
nb_status nb_per_sample_grads(nb_ctx *ctx, nb_gradcheck_fn loss, void *user, int n_params,
                              nb_tensor *const *params, int n_data, nb_tensor *const *data,
                              nb_tensor **grads) {
    const char *op = "per_sample_grads";
    if (!check_inputs(ctx, op, loss, n_params, params, grads, n_params > 0 ? (size_t)n_params : 0))
        return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    if (!data) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: data is NULL", op);
    if (n_data < 1)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: n_data is %d, expected at least 1 batched "
                           "tensor", op, n_data);
    int64_t B = 0;
    for (int k = 0; k < n_data; k++) {
        char s[64];
        if (!data[k]) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: data %d is NULL", op, k);
        if (data[k]->ndim < 1)
            return nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: data %d is a scalar, expected a batch "
                               "dim first", op, k);
        if (k == 0) B = data[0]->shape[0];
        if (data[k]->shape[0] != B)
            return nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: data %d is %s, its dim 0 is not the "
                               "batch size %lld of data 0", op, k,
                               nb_shape_str(data[k], s, sizeof s), (long long)B);
    }
    for (int j = 0; j < n_params; j++) {
        int64_t shape[NB_MAX_DIMS];
        if (params[j]->ndim + 1 > NB_MAX_DIMS)
            return nb_ctx_fail(ctx, NB_ERR_SIZE, "%s: parameter %d already has %d dims", op, j,
                               params[j]->ndim);
        shape[0] = B;
        memcpy(shape + 1, params[j]->shape, (size_t)params[j]->ndim * sizeof *shape);
        grads[j] = nb_zeros(ctx, params[j]->dtype, params[j]->ndim + 1, shape);
    }
    size_t np = (size_t)n_params;
    nb_tensor **in = nb_ctx_alloc(ctx, (np + (size_t)n_data) * sizeof *in);
    nb_tensor *total = NULL;
    for (int64_t b = 0; in && b < B && nb_ctx_status(ctx) == NB_OK; b++) {
        /* unrecorded views: leaves, even of parameters that require grad */
        bool was = nb_set_grad_enabled(ctx, false);
        for (size_t j = 0; j < np; j++) {
            in[j] = nb_reshape(ctx, params[j], params[j]->ndim, params[j]->shape);
            if (!in[j]) break;
            in[j]->grad = (char *)grads[j]->data +
                          (size_t)b * params[j]->numel * nb_dtype_size(params[j]->dtype);
            nb_requires_grad(in[j]);
        }
        nb_set_grad_enabled(ctx, was);
        for (int k = 0; k < n_data; k++) {
            const nb_tensor *d = data[k];
            size_t per = d->numel / (size_t)B;
            in[np + k] = nb_from_data(ctx, d->dtype, d->ndim - 1, d->shape + 1,
                                      (const char *)d->data + (size_t)b * per *
                                                                  nb_dtype_size(d->dtype));
        }
        if (nb_ctx_status(ctx) != NB_OK) break;
        nb_tensor *l = run(ctx, op, loss, user, in);
        if (!l) break;
        if (l->numel != 1) {
            char s[64];
            nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: the loss of sample %lld is %s, expected a scalar",
                        op, (long long)b, nb_shape_str(l, s, sizeof s));
            break;
        }
        total = total ? nb_add(ctx, total, l) : l;
    }
    /* a loss that does not reach the parameters: the zeros are the answer */
    if (total && total->requires_grad && nb_ctx_status(ctx) == NB_OK)
        nb_backward(ctx, total, NULL);
    nb_status st = nb_ctx_status(ctx);
    for (int j = 0; st != NB_OK && j < n_params; j++) grads[j] = NULL;
    return st;
}
