/* ops/grouped_linear.c - grouped_linear: a linear per group of rows, all
 * groups in one op (the expert products of a mixture of experts).
 *
 * x (M, K) holds n groups of rows one after the other, rows[0] of them,
 * then rows[1], ... (summing to M); w[g] (N, K) is group g's weight:
 *
 *   forward  y[group g]  = x[group g] @ w[g]^T          y (M, N)
 *   backward dx[group g] += dy[group g] @ w[g]
 *            dw[g]       += dy[group g]^T @ x[group g]
 *
 * Why one op and not n linears: n small products, each split over the
 * threads, make the threads meet n times, and each thread's share of a
 * small product runs below the kernel's speed. Here the threads split the
 * rows of all groups (y, dx) and the rows of all the weights' gradients
 * (dw) once, with no meeting between groups. Each element is computed the
 * same way whatever the split (nb_gemm_<T>'s rule), so the results do not
 * depend on the thread count. A group of 0 rows adds nothing to its
 * weight's gradient (zeros, as PyTorch's for a weight used on no rows; a
 * mixture of experts passes only the experts some token chose, so an
 * unused expert's gradient stays None). The group sizes are saved in
 * node->saved. */
#include "ops/ops_internal.h"

#include <string.h>

typedef struct gl_job {
    nb_dtype dt;
    int n;
    const int64_t *start; /* group g is rows [start[g], start[g + 1]) */
    int64_t unit;         /* rows a block (gl_unit) */
    const int64_t *bstart; /* group g's row blocks are [bstart[g], bstart[g + 1]) */
    int64_t K, N;
    const void *x, *dy;
    const void *const *w; /* n weights' data */
    void *y, *dx;         /* forward's y, backward's dx (NULL: no gradient) */
    void **dw;            /* n gradients, each NULL when it gets none */
    const bool *dw_add;   /* n: dw[g] += rather than = (a fresh buffer is stored) */
    bool add;             /* y or dx += rather than = */
} gl_job;

/* c (rows, cols) (+)= a @ b in the job's dtype, strides as nb_gemm_float */
static void gemm(nb_dtype dt, void *c, const void *a, int64_t ars, int64_t acs, const void *b,
                 int64_t brs, int64_t bcs, int64_t rows, int64_t inner, int64_t cols, bool add) {
    if (dt == NB_F32)
        nb_gemm_float(c, a, ars, acs, b, brs, bcs, rows, inner, cols, add);
    else
        nb_gemm_double(c, a, ars, acs, b, brs, bcs, rows, inner, cols, add);
}

#define AT(p, i) ((char *)(p) + (size_t)(i) * es)
#define CAT(p, i) ((const char *)(p) + (size_t)(i) * es)

/* The threads split the rows in blocks of one group's rows: `unit` rows
 * each, the micro-kernel's MR for float, and the group's last block takes
 * the rest (unit to 2 unit - 1 rows), so that no piece of a group is
 * shorter than MR rows unless the group is. Split row by row, the pieces of
 * a few rows cut off at the threads' boundaries ran on the unpacked gemm's
 * one-row tiles, far below the packed kernel's speed (some fifty such
 * pieces a step in the qwen3-moe of make bench-gpt). */
static int64_t gl_unit(nb_dtype dt) {
    const nb_sgemm_kernel *k = dt == NB_F32 ? nb_sgemm_kernel_best() : NULL;
    return k ? k->mr : 4;
}

/* A group of `rows` rows is this many blocks. */
static int64_t gl_blocks(int64_t rows, int64_t unit) {
    return rows > unit ? rows / unit : rows > 0;
}

/* Blocks [b0, b1) of a group of `rows` rows whose blocks are [0, nb): rows
 * [*r0, *r1) */
static void gl_block_rows(int64_t b0, int64_t b1, int64_t nb, int64_t rows, int64_t unit,
                          int64_t *r0, int64_t *r1) {
    *r0 = b0 * unit;
    *r1 = b1 == nb ? rows : b1 * unit;
}

/* Row blocks [lo, hi) of y (or of dx): each group's part of them as one
 * product. */
static void gl_rows_range(void *arg, int64_t lo, int64_t hi, bool backward) {
    const gl_job *j = arg;
    const size_t es = nb_dtype_size(j->dt);
    const int64_t K = j->K, N = j->N;
    for (int g = 0; g < j->n; g++) {
        int64_t b0 = j->bstart[g] > lo ? j->bstart[g] : lo;
        int64_t b1 = j->bstart[g + 1] < hi ? j->bstart[g + 1] : hi;
        if (b0 >= b1) continue;
        int64_t a, b;
        gl_block_rows(b0 - j->bstart[g], b1 - j->bstart[g], j->bstart[g + 1] - j->bstart[g],
                      j->start[g + 1] - j->start[g], j->unit, &a, &b);
        a += j->start[g], b += j->start[g];
        if (!backward) /* y (b-a, N) = x (b-a, K) @ w^T: w read with strides (1, K) */
            gemm(j->dt, AT(j->y, a * N), CAT(j->x, a * K), K, 1, j->w[g], 1, K, b - a, K, N,
                 j->add);
        else /* dx (b-a, K) (+)= dy (b-a, N) @ w (N, K) */
            gemm(j->dt, AT(j->dx, a * K), CAT(j->dy, a * N), N, 1, j->w[g], K, 1, b - a, N, K,
                 j->add);
    }
}

static void gl_forward_range(void *arg, int64_t lo, int64_t hi) {
    gl_rows_range(arg, lo, hi, false);
}

static void gl_dx_range(void *arg, int64_t lo, int64_t hi) { gl_rows_range(arg, lo, hi, true); }

/* Blocks [lo, hi) of the rows of all weight gradients, nb = gl_blocks(N)
 * blocks a group: block g nb + i is block i of the rows of
 * dw[g] (N, K) += dy[group g]^T @ x[group g]. */
static void gl_dw_range(void *arg, int64_t lo, int64_t hi) {
    const gl_job *j = arg;
    const size_t es = nb_dtype_size(j->dt);
    const int64_t K = j->K, N = j->N, nb = gl_blocks(N, j->unit);
    for (int g = 0; g < j->n; g++) {
        int64_t b0 = g * nb > lo ? g * nb : lo, b1 = (g + 1) * nb < hi ? (g + 1) * nb : hi;
        int64_t m0 = j->start[g], m = j->start[g + 1] - m0;
        if (b0 >= b1 || !j->dw[g] || m == 0) continue;
        int64_t r0, r1;
        gl_block_rows(b0 - g * nb, b1 - g * nb, nb, N, j->unit, &r0, &r1);
        gemm(j->dt, AT(j->dw[g], r0 * K), CAT(j->dy, m0 * N + r0), 1, N, CAT(j->x, m0 * K), K, 1,
             r1 - r0, m, K, j->dw_add[g]);
    }
}

/* The fewest items worth a thread: about 512k multiply-adds (as linear). */
static int64_t gl_grain(int64_t per_item) {
    int64_t g = per_item > 0 ? ((int64_t)1 << 19) / per_item : 1;
    return g > 0 ? g : 1;
}

/* The forward's chunks: each piece of a group's rows packs that group's
 * weight transposed again (nb_gemm_<T> packs b per call), so a thread takes
 * its share of the rows in two pieces at most, not in pieces halving down
 * to the grain (a share of four experts' rows then cost some ten packs). A
 * thread still finishing its share leaves the other half of it to take. */
static int64_t gl_forward_grain(int64_t blocks, int64_t per_block) {
    int64_t parts = 2 * (int64_t)nb_parallel_parts(), g = gl_grain(per_block);
    int64_t half_share = (blocks + parts - 1) / parts;
    return half_share > g ? half_share : g;
}

/* The checks of grouped_linear(x, n, w, rows) and its output, or NULL;
 * *in gets [x, w[0], ..., w[n-1]] (from ctx's arena) for the record. */
static nb_tensor *gl_out(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w,
                         const int64_t *rows, nb_tensor ***in) {
    const char *op = nb_op_name(NB_OP_GROUPED_LINEAR);
    if (!nb_ctx_ok(ctx)) return NULL;
    if (n < 1 || !w || !rows) {
        nb_ctx_fail(ctx, n < 1 ? NB_ERR_VALUE : NB_ERR_NULL,
                    "%s: %s, expected n >= 1 groups with an array of n weights and of n row "
                    "counts",
                    op, n < 1 ? "n < 1" : !w ? "the weight array is NULL" : "rows is NULL");
        return NULL;
    }
    if (!(*in = nb_ctx_alloc_raw(ctx, (size_t)(n + 1) * sizeof **in))) return NULL;
    (*in)[0] = x;
    for (int g = 0; g < n; g++) (*in)[g + 1] = w[g];
    if (!nb_check_float_inputs(ctx, op, n + 1, *in)) return NULL;
    char sx[64], sw[64], s0[64];
    if (x->ndim != 2) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE, "%s: x %s has %d dims, expected 2 (rows, in_features)",
                    op, nb_shape_str(x, sx, sizeof sx), x->ndim);
        return NULL;
    }
    int64_t total = 0;
    for (int g = 0; g < n; g++) {
        if (w[g]->ndim != 2 || w[g]->shape[1] != x->shape[1] ||
            w[g]->shape[0] != w[0]->shape[0]) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "%s: weight %d %s does not fit x %s and weight 1 %s: expected (%lld, "
                        "%lld) (out_features, in_features), one shape for all",
                        op, g + 1, nb_shape_str(w[g], sw, sizeof sw),
                        nb_shape_str(x, sx, sizeof sx), nb_shape_str(w[0], s0, sizeof s0),
                        (long long)(w[0]->ndim == 2 ? w[0]->shape[0] : -1),
                        (long long)x->shape[1]);
            return NULL;
        }
        if (rows[g] < 0 || rows[g] > x->shape[0] - total) {
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: group %d has %lld rows, expected 0 or more with all groups' rows "
                        "summing to x's %lld",
                        op, g + 1, (long long)rows[g], (long long)x->shape[0]);
            return NULL;
        }
        total += rows[g];
    }
    if (total != x->shape[0]) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: the %d groups have %lld rows but x %s has %lld", op,
                    n, (long long)total, nb_shape_str(x, sx, sizeof sx), (long long)x->shape[0]);
        return NULL;
    }
    return nb_empty(ctx, x->dtype, NB_SHAPE(x->shape[0], w[0]->shape[0]));
}

/* The job over the op's inputs in = [x, w[0], ..., w[n-1]] and the group
 * starts (n + 1 of them), the forward's and the backward's alike. */
static bool gl_job_init(nb_ctx *ctx, gl_job *j, nb_tensor *const *in, int n,
                        const int64_t *start) {
    const void **wd = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *wd);
    int64_t *bstart = nb_ctx_alloc_raw(ctx, (size_t)(n + 1) * sizeof *bstart);
    if (!wd || !bstart) return false;
    const int64_t unit = gl_unit(in[0]->dtype);
    bstart[0] = 0;
    for (int g = 0; g < n; g++) {
        wd[g] = in[g + 1]->data;
        bstart[g + 1] = bstart[g] + gl_blocks(start[g + 1] - start[g], unit);
    }
    *j = (gl_job){.dt = in[0]->dtype, .n = n, .start = start, .unit = unit, .bstart = bstart,
                  .K = in[0]->shape[1], .N = in[1]->shape[0], .x = in[0]->data, .w = wd};
    return true;
}

/* Group sizes to starts (n + 1, the first 0) and back, from ctx's arena. */
static int64_t *gl_starts(nb_ctx *ctx, int n, const int64_t *rows) {
    int64_t *start = nb_ctx_alloc_raw(ctx, (size_t)(n + 1) * sizeof *start);
    if (!start) return NULL;
    start[0] = 0;
    for (int g = 0; g < n; g++) start[g + 1] = start[g] + rows[g];
    return start;
}

static int64_t *gl_rows(nb_ctx *ctx, const nb_node *node) {
    const int n = node->n_in - 1;
    const int64_t *start = node->saved;
    int64_t *rows = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *rows);
    for (int g = 0; rows && g < n; g++) rows[g] = start[g + 1] - start[g];
    return rows;
}

static void grouped_linear_backward(nb_ctx *ctx, nb_node *node); /* below */

nb_tensor *nb_grouped_linear(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w,
                             const int64_t *rows) {
    nb_tensor **in = NULL;
    nb_tensor *out = gl_out(ctx, x, n, w, rows, &in);
    const int64_t *start = out ? gl_starts(ctx, n, rows) : NULL;
    gl_job j;
    if (!start || !gl_job_init(ctx, &j, in, n, start)) return NULL;
    j.y = out->data;
    if (j.K == 0)
        memset(out->data, 0, out->numel * nb_dtype_size(out->dtype));
    else if (out->numel)
        nb_parallel_for(j.bstart[n], gl_forward_grain(j.bstart[n], j.unit * j.K * j.N),
                        gl_forward_range, &j);
    nb_node *node = nb_record_op(ctx, NB_OP_GROUPED_LINEAR, out, n + 1, in,
                                 grouped_linear_backward);
    if (node) node->saved = (void *)j.start; /* the n + 1 group starts */
    return out;
}

/* ---- backward --------------------------------------------------------------------------- */
/* dx and every dw as one job of two tasks (dx's rows, dw's rows), so the
 * threads meet once. When one tensor is two of the inputs (x is a weight,
 * or a weight serves two groups) their gradients are one buffer: the
 * products then run in order on this thread, dx first. */
static void grouped_linear_backward(nb_ctx *ctx, nb_node *node) {
    nb_tensor *x = node->in[0];
    const int n = node->n_in - 1;
    const int64_t *start = node->saved;
    gl_job j;
    void **dw = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *dw);
    bool *dw_add = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *dw_add);
    if (!dw || !dw_add || !gl_job_init(ctx, &j, node->in, n, start)) return;
    j.dy = node->out->grad, j.dw = dw, j.dw_add = dw_add;
    bool shared = false;
    for (int g = 0; g < n; g++)
        for (int h = 0; h <= g; h++) shared = shared || node->in[h] == node->in[g + 1];
    bool fresh = false;
    j.dx = nb_grad_buffer_fresh(ctx, x, &fresh);
    j.add = !fresh;
    const int64_t M = x->shape[0], blocks = j.bstart[n], dw_blocks = n * gl_blocks(j.N, j.unit);
    const bool empty = j.K == 0 || j.N == 0; /* no products: nothing to add */
    if (j.N == 0 && j.dx && fresh) /* dx is zeros, stored as a fresh buffer must be */
        memset(j.dx, 0, x->numel * nb_dtype_size(x->dtype));
    if (shared && j.dx && !empty) gl_dx_range(&j, 0, blocks); /* before dw is asked for */
    if (shared) j.dx = NULL;
    for (int g = 0; g < n; g++) { /* a group of no rows adds nothing */
        /* a fresh buffer is stored by the product, unless a shared one
         * (its products then run in order, each adding) or no product
         * writes it */
        bool fresh = false;
        dw[g] = start[g + 1] == start[g] ? NULL
                : shared || empty ? nb_grad_buffer(ctx, node->in[g + 1])
                                  : nb_grad_buffer_fresh(ctx, node->in[g + 1], &fresh);
        dw_add[g] = !fresh;
    }
    if (empty) return;
    if (shared) {
        gl_dw_range(&j, 0, dw_blocks);
        return;
    }
    nb_task t[2];
    int nt = 0;
    const double u = (double)j.unit;
    if (j.dx) t[nt++] = (nb_task){gl_dx_range, &j, blocks, u * (double)(j.N * j.K)};
    t[nt++] = (nb_task){gl_dw_range, &j, dw_blocks, u * (double)(M / n + 1) * (double)j.K};
    nb_parallel_tasks(t, nt, (double)((int64_t)1 << 19));
}

/* ---- graph backward: dx = grouped_linear(dy, w[g]^T), dw[g] = dy[g]^T @ x[g]
 * from recorded ops (split into the groups' rows) ------------------------ */
void nb_graph_backward_grouped_linear(nb_ctx *ctx, nb_node *node, nb_tensor *dout,
                                      nb_tensor **din) {
    nb_tensor *x = node->in[0];
    const int n = node->n_in - 1;
    int64_t *rows = gl_rows(ctx, node);
    nb_tensor **wt = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *wt);
    nb_tensor **dyg = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *dyg);
    nb_tensor **xg = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *xg);
    if (!rows || !wt || !dyg || !xg) return;
    for (int g = 0; g < n; g++) /* (K, N): transposed copies (nb_transpose copies already) */
        wt[g] = nb_transpose(ctx, node->in[g + 1], 0, 1);
    if (x->requires_grad) din[0] = nb_grouped_linear(ctx, dout, n, wt, rows);
    if (nb_split(ctx, dout, 0, n, rows, dyg) || nb_split(ctx, x, 0, n, rows, xg)) return;
    for (int g = 0; g < n; g++)
        if (node->in[g + 1]->requires_grad && rows[g] > 0)
            din[g + 1] = nb_matmul(ctx, nb_transpose(ctx, dyg[g], 0, 1), xg[g]);
}

/* forward mode: grouped_linear(tx, w) + grouped_linear(x, tw), a missing
 * weight tangent being zeros */
nb_tensor *nb_forward_grouped_linear(nb_ctx *ctx, nb_node *node, nb_tensor *const *tin) {
    nb_tensor *x = node->in[0];
    const int n = node->n_in - 1;
    int64_t *rows = gl_rows(ctx, node);
    nb_tensor **tw = nb_ctx_alloc_raw(ctx, (size_t)n * sizeof *tw);
    if (!rows || !tw) return NULL;
    bool any_w = false;
    for (int g = 0; g < n; g++) any_w = any_w || tin[g + 1];
    nb_tensor *a = tin[0] ? nb_grouped_linear(ctx, tin[0], n, node->in + 1, rows) : NULL;
    nb_tensor *b = NULL;
    if (any_w) {
        for (int g = 0; g < n; g++)
            if (!(tw[g] = nb_fwd_or_zeros(ctx, tin[g + 1], node->in[g + 1]))) return NULL;
        b = nb_grouped_linear(ctx, x, n, tw, rows);
    }
    return nb_fwd_sum(ctx, node->out, a, b, 1);
}
