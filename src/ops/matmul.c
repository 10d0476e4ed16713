/* ops/matmul.c - the matrix product, batched with broadcasting, with
 * torch.matmul's rules for vectors:
 *
 *   forward   C   = A  @ B
 *   backward  dA += dC @ B^T,  dB += A^T @ dC
 *
 * A 1-D operand is a matrix of one row (on the left, (k) as (1, k)) or of
 * one column (on the right, (k) as (k, 1)) whose dim is dropped from the
 * result; its data is laid out as that matrix's already, so the kernels
 * see matrices only. Every product runs on the gemm engine
 * (kernels/gemm.c), which reads a transposed operand through its strides,
 * so no transpose is materialised. The (broadcast) batch of products is
 * split over the worker pool. */
#include "ops/ops_internal.h"

/* ---- shapes ------------------------------------------------------------------ */

/* a (..., n, k) @ b (..., k, m) with the batch dims padded on the left to
 * MM_NB (the most a tensor can have besides its matrix dims); a 1-D a is
 * n = 1 and a 1-D b is m = 1, neither with batch dims. */
#define MM_NB (NB_MAX_DIMS - 2)
typedef struct mm_dims {
    int64_t n, k, m;
    int64_t batch[MM_NB]; /* broadcast batch shape */
    int64_t sa[MM_NB];    /* a's stride per batch dim, in matrices; 0 where broadcast */
    int64_t sb[MM_NB];    /* b's, likewise */
} mm_dims;

/* Validates the pair and fills *d and the output shape; false with an error. */
static bool mm_shapes(nb_ctx *ctx, const nb_tensor *a, const nb_tensor *b, mm_dims *d,
                      int *ndim, int64_t *shape) {
    /* the shapes are formatted only on the way to an error */
    char sa[64], sb[64];
#define SHAPES nb_shape_str(a, sa, sizeof sa), nb_shape_str(b, sb, sizeof sb)
    const nb_tensor *in[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        if (in[i]->ndim < 1) {
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "matmul: %s @ %s: input %d has 0 dims, expected 1 to 8 (a vector (k), "
                        "or a (..., n, k) @ (..., k, m) pair)",
                        SHAPES, i + 1);
            return false;
        }
    }
    bool va = a->ndim == 1, vb = b->ndim == 1;
    d->n = va ? 1 : a->shape[a->ndim - 2];
    d->k = a->shape[a->ndim - 1];
    d->m = vb ? 1 : b->shape[b->ndim - 1];
    int64_t kb = vb ? b->shape[0] : b->shape[b->ndim - 2];
    if (kb != d->k) {
        nb_ctx_fail(ctx, NB_ERR_SHAPE,
                    "matmul: %s @ %s: inner dims %lld and %lld differ, expected (..., n, k) @ "
                    "(..., k, m), where either may be a vector (k)",
                    SHAPES, (long long)d->k, (long long)kb);
        return false;
    }
    /* batch dims, padded to MM_NB on the left */
    int64_t ba[MM_NB], bb[MM_NB];
    int na = va ? 0 : a->ndim - 2, nbt = vb ? 0 : b->ndim - 2;
    for (int i = 0; i < MM_NB; i++) ba[i] = bb[i] = 1;
    for (int i = 0; i < na; i++) ba[MM_NB - na + i] = a->shape[i];
    for (int i = 0; i < nbt; i++) bb[MM_NB - nbt + i] = b->shape[i];
    for (int i = 0; i < MM_NB; i++) {
        if (ba[i] != bb[i] && ba[i] != 1 && bb[i] != 1) {
            char da[48], db[48];
            nb_ctx_fail(ctx, NB_ERR_SHAPE,
                        "matmul: %s @ %s: batch dims %s and %s do not broadcast, expected "
                        "equal sizes or 1",
                        SHAPES, nb_dims_str(na, a->shape, "()", da, sizeof da),
                        nb_dims_str(nbt, b->shape, "()", db, sizeof db));
            return false;
        }
        d->batch[i] = ba[i] > bb[i] ? ba[i] : bb[i];
    }
    int64_t step_a = 1, step_b = 1; /* matrices per step of each batch dim, from the right */
    for (int i = MM_NB - 1; i >= 0; i--) {
        d->sa[i] = ba[i] == 1 ? 0 : step_a;
        d->sb[i] = bb[i] == 1 ? 0 : step_b;
        step_a *= ba[i];
        step_b *= bb[i];
    }

    /* (batch..., n, m), without n for a vector a and without m for a vector b */
    int nd = na > nbt ? na : nbt;
    for (int i = 0; i < nd; i++) shape[i] = d->batch[MM_NB - nd + i];
    if (!va) shape[nd++] = d->n;
    if (!vb) shape[nd++] = d->m;
    *ndim = nd;
    return true;
#undef SHAPES
}

/* ---- threads ----------------------------------------------------------------- */

/* One gemm call, as nb_gemm_<T> takes it; rows of c (and of a) can be split
 * among threads, since each element of c is computed the same way. */
typedef struct mm_gemm {
    nb_dtype dt;
    void *c;
    const void *a, *b;
    int64_t ars, acs, brs, bcs, rows, inner, cols;
    bool add;
} mm_gemm;

static void mm_gemm_rows(const mm_gemm *g, int64_t lo, int64_t hi) {
    if (g->dt == NB_F32)
        nb_gemm_float((float *)g->c + lo * g->cols, (const float *)g->a + lo * g->ars, g->ars,
                      g->acs, g->b, g->brs, g->bcs, hi - lo, g->inner, g->cols, g->add);
    else
        nb_gemm_double((double *)g->c + lo * g->cols, (const double *)g->a + lo * g->ars,
                       g->ars, g->acs, g->b, g->brs, g->bcs, hi - lo, g->inner, g->cols, g->add);
}

static void mm_gemm_range(void *arg, int64_t lo, int64_t hi) { mm_gemm_rows(arg, lo, hi); }

/* The fewest items worth a thread: about 256k multiply-adds. */
static int64_t mm_grain(int64_t per_item) {
    int64_t g = per_item > 0 ? ((int64_t)1 << 18) / per_item : 1;
    return g > 0 ? g : 1;
}

/* One gemm on every thread, split over c's rows. */
static void mm_gemm_par(mm_gemm *g) {
    if (g->dt == NB_F32)
        nb_gemm_float_par(g->c, NULL, g->a, g->ars, g->acs, g->b, g->brs, g->bcs, g->rows,
                          g->inner, g->cols, g->add);
    else
        nb_parallel_for(g->rows, mm_grain(g->inner * g->cols), mm_gemm_range, g);
}

/* What a batched product computes for one batch entry. */
typedef enum { MM_FORWARD, MM_GRAD_A, MM_GRAD_B } mm_mode;

typedef struct mm_job {
    mm_dims d;
    mm_mode mode;
    nb_dtype dt;
    const void *A, *B, *G; /* inputs and the output's gradient */
    void *C;               /* the output (forward) or the gradient written */
    bool add;              /* forward: C += A @ B (a tangent's second product) */
} mm_job;

/* The gemm of batch entry ic (ia, ib: the matrices of a and b it reads), or
 * of the whole folded batch (b 2-d: ia = ib = ic = 0, `rows` rows). */
static mm_gemm mm_entry(const mm_job *j, int64_t ia, int64_t ib, int64_t ic, int64_t rows) {
    int64_t n = j->d.n, k = j->d.k, m = j->d.m;
    size_t es = nb_dtype_size(j->dt);
    const char *A = (const char *)j->A + (size_t)(ia * n * k) * es;
    const char *B = (const char *)j->B + (size_t)(ib * k * m) * es;
    switch (j->mode) {
    case MM_FORWARD: /* C (rows, m) = A (rows, k) @ B (k, m) */
        return (mm_gemm){j->dt, (char *)j->C + (size_t)(ic * n * m) * es, A, B,
                         k, 1, m, 1, rows, k, m, j->add};
    case MM_GRAD_A: /* dA (rows, k) += G (rows, m) @ B^T */
        return (mm_gemm){j->dt, (char *)j->C + (size_t)(ia * n * k) * es,
                         (const char *)j->G + (size_t)(ic * n * m) * es, B,
                         m, 1, 1, m, rows, m, k, true};
    default: /* dB (k, m) += A^T (k, rows) @ G (rows, m) */
        return (mm_gemm){j->dt, (char *)j->C + (size_t)(ib * k * m) * es, A,
                         (const char *)j->G + (size_t)(ic * n * m) * es,
                         1, k, m, 1, k, rows, m, true};
    }
}

static void mm_entry_index(const mm_dims *d, int64_t ic, int64_t *ia, int64_t *ib) {
    *ia = *ib = 0;
    for (int i = MM_NB - 1; i >= 0 && ic > 0; i--) {
        int64_t k = ic % d->batch[i];
        ic /= d->batch[i];
        *ia += k * d->sa[i], *ib += k * d->sb[i];
    }
}

/* Batch entries [lo, hi), each on one thread. */
static void mm_batch_range(void *arg, int64_t lo, int64_t hi) {
    const mm_job *j = arg;
    for (int64_t ic = lo; ic < hi; ic++) {
        int64_t ia, ib;
        mm_entry_index(&j->d, ic, &ia, &ib);
        mm_gemm g = mm_entry(j, ia, ib, ic, j->d.n);
        mm_gemm_rows(&g, 0, g.rows);
    }
}

/* Runs the job on every thread. When b is one matrix shared by the whole
 * batch, the batch is folded into a's rows (one (batch*n, k) @ (k, m)
 * product) split over its rows. Otherwise batch entries are split among
 * threads when each writes its own matrix; when several entries add into
 * one (a gradient of a broadcast operand) they run in order, each split
 * over its rows, so the sums keep their order. */
static void mm_run(mm_job *j, bool b_is_2d) {
    const mm_dims *d = &j->d;
    int64_t entries = 1;
    bool a_own = true, b_own = true; /* every batch entry has a matrix of its own */
    for (int i = 0; i < MM_NB; i++) {
        entries *= d->batch[i];
        a_own = a_own && (d->sa[i] || d->batch[i] == 1);
        b_own = b_own && (d->sb[i] || d->batch[i] == 1);
    }
    if (b_is_2d) {
        mm_gemm g = mm_entry(j, 0, 0, 0, entries * d->n);
        mm_gemm_par(&g);
        return;
    }
    bool own = j->mode == MM_FORWARD || (j->mode == MM_GRAD_A ? a_own : b_own);
    if (own && entries >= 4) {
        nb_parallel_for(entries, mm_grain(d->n * d->k * d->m), mm_batch_range, j);
        return;
    }
    for (int64_t ic = 0; ic < entries; ic++) {
        int64_t ia, ib;
        mm_entry_index(d, ic, &ia, &ib);
        mm_gemm g = mm_entry(j, ia, ib, ic, d->n);
        mm_gemm_par(&g);
    }
}

/* ---- matmul: C = A @ B ------------------------------------------------------ */
/* A (..., n, k), B (..., k, m), C (..., n, m); A (k) is read as (1, k) and
 * B (k) as (k, 1), with their gradients written in the same layout.
 * dA += dC @ B^T  (n, m) @ (m, k), summed over the batch entries sharing A;
 * dB += A^T @ dC  (k, n) @ (n, m), summed over those sharing B.
 * Reuses the saved inputs A and B (and dC). */
static void matmul_backward(nb_ctx *ctx, nb_node *node) {
    nb_tensor *a = node->in[0], *b = node->in[1], *out = node->out;
    void *ga = nb_grad_buffer(ctx, a), *gb = nb_grad_buffer(ctx, b);
    mm_job j = {.dt = out->dtype, .A = a->data, .B = b->data, .G = out->grad};
    int nd;
    int64_t shape[NB_MAX_DIMS];
    if (!mm_shapes(ctx, a, b, &j.d, &nd, shape)) return;
    if (ga) {
        j.mode = MM_GRAD_A;
        j.C = ga;
        mm_run(&j, b->ndim <= 2);
    }
    if (gb) {
        j.mode = MM_GRAD_B;
        j.C = gb;
        mm_run(&j, b->ndim <= 2);
    }
}

nb_tensor *nb_matmul(nb_ctx *ctx, nb_tensor *a, nb_tensor *b) {
    nb_tensor *in[2] = {a, b};
    if (!nb_check_float_inputs(ctx, "matmul", 2, in)) return NULL;
    mm_dims d;
    int nd;
    int64_t shape[NB_MAX_DIMS];
    if (!mm_shapes(ctx, a, b, &d, &nd, shape)) return NULL;
    /* gemm overwrites the output, unless the inner dim is empty: then it is 0 */
    nb_tensor *out = d.k ? nb_empty(ctx, a->dtype, nd, shape) : nb_zeros(ctx, a->dtype, nd, shape);
    if (!out) return NULL;
    mm_job j = {.d = d, .mode = MM_FORWARD, .dt = a->dtype, .A = a->data, .B = b->data,
                .C = out->data};
    if (d.k && out->numel) mm_run(&j, b->ndim <= 2);
    nb_record_op(ctx, NB_OP_MATMUL, out, 2, in, matmul_backward);
    return out;
}

/* ---- graph backward: dA = dC @ B^T, dB = A^T @ dC from recorded ops, each
 * summed back over the batch dims its operand was broadcast along; vectors
 * are viewed as the matrices the forward read (A (1, k), B (k, 1), dC with
 * the dims they dropped) and the gradients viewed back ------------------ */
static nb_tensor *last_two_swapped(nb_ctx *ctx, nb_tensor *t) {
    return nb_transpose(ctx, t, t->ndim - 2, t->ndim - 1);
}

static nb_tensor *as_shape_of(nb_ctx *ctx, nb_tensor *t, const nb_tensor *like) {
    return t && t->ndim != like->ndim ? nb_reshape(ctx, t, like->ndim, like->shape) : t;
}

void nb_graph_backward_matmul(nb_ctx *ctx, nb_node *n, nb_tensor *dout, nb_tensor **din) {
    nb_tensor *a = n->in[0], *b = n->in[1], *g = dout;
    bool va = a->ndim == 1, vb = b->ndim == 1;
    if (va) a = nb_reshape(ctx, a, 2, (int64_t[]){1, a->shape[0]});
    if (vb) b = nb_reshape(ctx, b, 2, (int64_t[]){b->shape[0], 1});
    if (va || vb) {
        int64_t shape[NB_MAX_DIMS];
        int nd = dout->ndim - !va - !vb; /* dout's batch dims */
        for (int i = 0; i < nd; i++) shape[i] = dout->shape[i];
        shape[nd] = va ? 1 : dout->shape[nd];
        shape[nd + 1] = vb ? 1 : dout->shape[dout->ndim - 1];
        g = nb_reshape(ctx, dout, nd + 2, shape);
    }
    if (!a || !b || !g) return;
    if (a->requires_grad)
        din[0] = as_shape_of(ctx, nb_sum_to(ctx, nb_matmul(ctx, g, last_two_swapped(ctx, b)), a),
                             n->in[0]);
    if (b->requires_grad)
        din[1] = as_shape_of(ctx, nb_sum_to(ctx, nb_matmul(ctx, last_two_swapped(ctx, a), g), b),
                             n->in[1]);
}

/* forward mode: ta @ b + a @ tb (nb_matmul broadcasts the batch dims and
 * treats 1-D operands as the forward did); when nothing records the tangent
 * and both terms are there, the second product adds into the first's
 * output (one buffer, no separate sum) */
nb_tensor *nb_forward_matmul(nb_ctx *ctx, nb_node *n, nb_tensor *const *tin) {
    if (tin[0] && tin[1] && nb_fwd_unrecorded(ctx, n, tin)) {
        nb_tensor *a = n->in[0], *b = n->in[1];
        mm_job j = {.mode = MM_FORWARD, .dt = a->dtype};
        int nd;
        int64_t shape[NB_MAX_DIMS];
        if (!mm_shapes(ctx, a, b, &j.d, &nd, shape)) return NULL;
        nb_tensor *t = j.d.k ? nb_empty(ctx, a->dtype, nd, shape)
                             : nb_zeros(ctx, a->dtype, nd, shape);
        if (!t || !j.d.k || !t->numel) return t;
        j.C = t->data;
        j.A = tin[0]->data, j.B = b->data;
        mm_run(&j, b->ndim <= 2);
        j.A = a->data, j.B = tin[1]->data, j.add = true;
        mm_run(&j, b->ndim <= 2);
        return t;
    }
    nb_tensor *a = tin[0] ? nb_matmul(ctx, tin[0], n->in[1]) : NULL;
    nb_tensor *b = tin[1] ? nb_matmul(ctx, n->in[0], tin[1]) : NULL;
    return nb_fwd_sum(ctx, n->out, a, b, 1);
}
