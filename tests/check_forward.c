/* check_forward.c - forward mode: dual tensors through every op, their
 * composition with reverse mode, custom ops' forward-mode rules and
 * gradcheck's check_forward_ad.
 *
 * Every op is checked by the adjoint identity <w, J t> = <Jᵀ w, t>: the
 * tangent a dual forward gives (J t, from the ops' forward-mode rules)
 * against the reverse-mode gradient nb_backward gives for a random w (Jᵀ w,
 * from the ops' backward kernels), two independent computations, in f64.
 * The cases are the op list's rows (tools/support/op_rows.h) and, for the
 * ops written by hand (NB_OP_HAND), the table below; a test fails when an
 * op has neither. */
#include "check_nabla.h"

#include "op_rows.h"

/* ---- the cases ---------------------------------------------------------------- */
typedef enum { K_REAL, K_AWAY, K_POS, K_IDS, K_MASK } kind;

typedef struct fwd_input {
    kind k;
    int ndim;
    int64_t shape[4];
    int64_t classes; /* K_IDS: values in [0, classes) */
} fwd_input;

typedef struct fwd_case {
    const char *op; /* nb_op_name of the op it covers */
    const char *what;
    nb_gradcheck_fn fn;
    int n_in;
    fwd_input in[4];
} fwd_case;

#define IN(k, ...) {k, NB_ROW_NARGS(__VA_ARGS__), {__VA_ARGS__}, 0}
#define IDS(c, ...) {K_IDS, NB_ROW_NARGS(__VA_ARGS__), {__VA_ARGS__}, c}

static nb_tensor *f_pow(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_pow(c, x[0], 2.5);
}
static nb_tensor *f_gelu(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_add(c, nb_gelu(c, x[0], NB_GELU_NONE), nb_gelu(c, x[0], NB_GELU_TANH));
}
static nb_tensor *f_sum_dim(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_sum_dim(c, x[0], 1, false);
}
static nb_tensor *f_mean_dim(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_mean_dim(c, x[0], -1, true);
}
static nb_tensor *f_max_dim(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_max_dim(c, x[0], 1, false, NULL);
}
static nb_tensor *f_topk(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_topk(c, x[0], 2, -1, NULL);
}
static nb_tensor *f_index_select(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_index_select(c, x[0], x[1]);
}
static nb_tensor *f_index_add(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_index_add(c, x[0], x[1], x[2]);
}
static nb_tensor *f_transpose(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_transpose(c, x[0], 0, 2);
}
static nb_tensor *f_permute(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_permute(c, x[0], (const int[]){2, 0, 1});
}
static nb_tensor *f_reshape(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_reshape(c, x[0], NB_SHAPE(3, -1));
}
static nb_tensor *f_concat(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_concat(c, 2, x, 1);
}
static nb_tensor *f_split(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    nb_tensor *p[3] = {0};
    if (nb_split(c, x[0], 1, 3, (const int64_t[]){2, 2, 2}, p)) return NULL;
    return nb_add(c, nb_mul(c, p[0], p[1]), p[2]);
}
static nb_tensor *f_masked_fill(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_masked_fill(c, x[0], x[1], -2.0);
}
static nb_tensor *f_causal_fill(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_softmax(c, nb_causal_fill(c, x[0], -INFINITY));
}
static nb_tensor *f_cross_entropy(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_cross_entropy(c, x[0], x[1]);
}
static nb_tensor *f_linear(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_linear(c, x[0], x[1], x[2]);
}
static nb_tensor *f_grouped_linear(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_grouped_linear(c, x[0], 3, x + 1, (const int64_t[]){2, 0, 3});
}
static nb_tensor *f_dropout(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    nb_pcg32 rng; /* the same mask on every call */
    nb_pcg32_seed(&rng, 7, 7);
    return nb_dropout(c, x[0], 0.4, true, &rng);
}
static nb_tensor *f_embedding(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_embedding(c, x[0], x[1]);
}
static nb_tensor *f_layer_norm(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_layer_norm(c, x[0], x[1], x[2], 1e-5);
}
static nb_tensor *f_rms_norm(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_rms_norm(c, x[0], x[1], 1e-6);
}
/* GQA (4 query heads on 2 key/value heads), causal, a window of 2 and a key
 * padding mask */
static nb_tensor *f_sdpa(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    nb_sdpa_opts o = {.key_padding_mask = x[3], .causal = true, .window = 2};
    return nb_sdpa_ex(c, x[0], x[1], x[2], &o);
}
static nb_tensor *f_sdpa_dropout(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    return nb_sdpa(c, x[0], x[1], x[2], NULL, false, 0.5, 0.3, 11);
}
static nb_tensor *f_rope(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    nb_tensor *cos, *sin;
    if (nb_rope_tables(c, 4, 8, 10000.0, NULL, NB_F64, &cos, &sin)) return NULL;
    return nb_rope(c, x[0], cos, sin, 2, NB_ROPE_INTERLEAVED);
}

static const fwd_case hand_cases[] = {
    {"pow", "(2,3) ** 2.5", f_pow, 1, {IN(K_POS, 2, 3)}},
    {"gelu", "(2,3) both forms", f_gelu, 1, {IN(K_REAL, 2, 3)}},
    {"sum_dim", "(2,3,4) dim 1", f_sum_dim, 1, {IN(K_REAL, 2, 3, 4)}},
    {"mean_dim", "(3,4) dim -1 keepdim", f_mean_dim, 1, {IN(K_REAL, 3, 4)}},
    {"max_dim", "(2,5,3) dim 1", f_max_dim, 1, {IN(K_REAL, 2, 5, 3)}},
    {"topk", "(3,6) k 2", f_topk, 1, {IN(K_REAL, 3, 6)}},
    {"index_select", "(5,3) idx (7)", f_index_select, 2, {IN(K_REAL, 5, 3), IDS(5, 7)}},
    {"index_add", "(4,3) idx (6) src (6,3)", f_index_add, 3,
     {IN(K_REAL, 4, 3), IDS(4, 6), IN(K_REAL, 6, 3)}},
    {"transpose", "(2,3,4) dims 0,2", f_transpose, 1, {IN(K_REAL, 2, 3, 4)}},
    {"permute", "(2,3,4) to (2,0,1)", f_permute, 1, {IN(K_REAL, 2, 3, 4)}},
    {"reshape", "(2,3,2) to (3,-1)", f_reshape, 1, {IN(K_REAL, 2, 3, 2)}},
    {"concat", "(2,1,3), (2,2,3) dim 1", f_concat, 2, {IN(K_REAL, 2, 1, 3), IN(K_REAL, 2, 2, 3)}},
    {"split", "(2,6) into 2,2,2", f_split, 1, {IN(K_REAL, 2, 6)}},
    {"masked_fill", "(2,3,4) mask (3,4)", f_masked_fill, 2, {IN(K_REAL, 2, 3, 4), IN(K_MASK, 3, 4)}},
    {"causal_fill", "(2,4,4) then softmax", f_causal_fill, 1, {IN(K_REAL, 2, 4, 4)}},
    {"cross_entropy", "(4,5) targets (4)", f_cross_entropy, 2, {IN(K_REAL, 4, 5), IDS(5, 4)}},
    {"linear", "(2,3,4) W(5,4) b(5)", f_linear, 3,
     {IN(K_REAL, 2, 3, 4), IN(K_REAL, 5, 4), IN(K_REAL, 5)}},
    {"grouped_linear", "(5,4) rows 2,0,3 W 3 x (3,4)", f_grouped_linear, 4,
     {IN(K_REAL, 5, 4), IN(K_REAL, 3, 4), IN(K_REAL, 3, 4), IN(K_REAL, 3, 4)}},
    {"dropout", "(4,5) p 0.4 fixed mask", f_dropout, 1, {IN(K_REAL, 4, 5)}},
    {"embedding", "W(6,3) ids (2,4)", f_embedding, 2, {IN(K_REAL, 6, 3), IDS(6, 2, 4)}},
    {"layer_norm", "(2,3,5) affine", f_layer_norm, 3,
     {IN(K_REAL, 2, 3, 5), IN(K_REAL, 5), IN(K_REAL, 5)}},
    {"rms_norm", "(2,3,5) weight", f_rms_norm, 2, {IN(K_REAL, 2, 3, 5), IN(K_REAL, 5)}},
    {"sdpa", "GQA 4/2, causal, window 2, padding", f_sdpa, 4,
     {IN(K_REAL, 2, 5, 4, 3), IN(K_REAL, 2, 5, 2, 3), IN(K_REAL, 2, 5, 2, 3), IN(K_MASK, 2, 5)}},
    {"sdpa", "dropout 0.3, scale 0.5", f_sdpa_dropout, 3,
     {IN(K_REAL, 1, 4, 2, 3), IN(K_REAL, 1, 6, 2, 3), IN(K_REAL, 1, 6, 2, 2)}},
    {"rope", "(2,5,4) interleaved, pos0 2", f_rope, 1, {IN(K_REAL, 2, 5, 4)}},
};
#define N_HAND ((int)(sizeof hand_cases / sizeof hand_cases[0]))

static nb_tensor *draw(nb_ctx *c, const fwd_input *in, nb_pcg32 *rng) {
    nb_dtype dt = in->k == K_IDS ? NB_I64 : in->k == K_MASK ? NB_BOOL : NB_F64;
    nb_tensor *t = nb_zeros(c, dt, in->ndim, in->shape);
    for (size_t i = 0; t && i < t->numel; i++) {
        double u = nb_pcg32_double(rng);
        double v = in->k == K_AWAY  ? (0.2 + 0.8 * u) * (nb_pcg32_bounded(rng, 2) ? 1 : -1)
                   : in->k == K_POS ? 0.3 + 1.7 * u
                   : in->k == K_IDS ? (double)nb_pcg32_bounded(rng, (uint32_t)in->classes)
                   : in->k == K_MASK ? (double)(u < 0.3)
                                     : 2 * u - 1;
        nb_set(t, i, v);
    }
    if (t && in->k == K_MASK) nb_set(t, 0, 0.0); /* a key every row may see */
    return t;
}

static double dot(const nb_tensor *a, const double *b) {
    double s = 0;
    for (size_t i = 0; i < a->numel; i++) s += nb_get(a, i) * b[i];
    return s;
}

/* <w, J t> by forward mode against <Jᵀ w, t> by reverse mode, for f at
 * inputs drawn as `in` says; the tangent must also have the output's shape. */
static void check_adjoint(const char *op, const char *what, nb_gradcheck_fn f, int n_in,
                          const fwd_input *in, nb_pcg32 *rng) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x[4] = {0}, *t[4] = {0}, *y = NULL, *ty = NULL;
    for (int i = 0; i < n_in; i++) {
        x[i] = draw(c, &in[i], rng);
        if (x[i]->dtype == NB_F64)
            t[i] = nb_normal(c, NB_F64, x[i]->ndim, x[i]->shape, 0.0, 1.0, rng);
    }
    ck_assert_msg(nb_jvp_fwd(c, f, NULL, n_in, x, t, &y, &ty) == NB_OK, "%s %s: %s", op, what,
                  nb_ctx_error(c));
    ck_assert_msg(nb_same_shape(y, ty) && ty->dtype == NB_F64, "%s: tangent's shape", op);
    nb_tensor *w = nb_normal(c, NB_F64, y->ndim, y->shape, 0.0, 1.0, rng);
    double *wd = w->data, fwd = dot(ty, wd);
    /* reverse: Jᵀ w into the inputs' .grad */
    nb_ctx *r = nb_ctx_new(0);
    nb_tensor *xr[4] = {0};
    for (int i = 0; i < n_in; i++) {
        xr[i] = nb_copy(r, x[i], x[i]->dtype);
        if (t[i]) nb_requires_grad(xr[i]);
    }
    nb_tensor *yr = f(r, xr, NULL);
    ck_assert_msg(yr && nb_backward(r, yr, nb_copy(r, w, NB_F64)) == NB_OK, "%s: %s", op,
                  nb_ctx_error(r));
    double rev = 0;
    for (int i = 0; i < n_in; i++)
        for (size_t k = 0; t[i] && k < t[i]->numel; k++)
            rev += nb_grad_get(xr[i], k) * nb_get(t[i], k);
    ck_assert_msg(fabs(fwd - rev) <= 1e-10 * (1 + fabs(rev)),
                  "%s %s: <w, J t> by forward mode %.17g, <Jᵀ w, t> by reverse mode %.17g", op,
                  what, fwd, rev);
    /* the primal is the plain forward's value */
    for (size_t k = 0; k < y->numel; k++) ck_assert_double_eq(nb_get(y, k), nb_get(yr, k));
    nb_ctx_free(r);
    nb_ctx_free(c);
}

/* Every row of the op list, by its generated case. */
START_TEST(test_dual_every_row_op) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 36, 1);
    for (int r = 0; r < NB_N_ROW_CASES; r++) {
        const nb_row_case *rc = &nb_row_cases[r];
        fwd_input in[NB_ROW_MAX_IN];
        for (int i = 0; i < rc->n_in; i++) {
            in[i] = (fwd_input){rc->in[i].domain == NB_ROW_AWAY       ? K_AWAY
                                : rc->in[i].domain == NB_ROW_POSITIVE ? K_POS
                                                                      : K_REAL,
                                rc->in[i].ndim, {0}, 0};
            for (int d = 0; d < rc->in[i].ndim; d++) in[i].shape[d] = rc->in[i].shape[d];
        }
        check_adjoint(rc->name, "op list", rc->fn, rc->n_in, in, &rng);
    }
}
END_TEST

/* Every op written by hand, by the table above; and every op has a case. */
START_TEST(test_dual_every_hand_op) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 36, 2);
    for (int k = 0; k < N_HAND; k++) {
        const fwd_case *fc = &hand_cases[k];
        check_adjoint(fc->op, fc->what, fc->fn, fc->n_in, fc->in, &rng);
    }
    for (int op = 0; op < NB_OP_CUSTOM; op++) {
        bool covered = nb_row_case_of(op) != NULL;
        for (int k = 0; k < N_HAND && !covered; k++)
            covered = !strcmp(hand_cases[k].op, nb_op_name(op));
        ck_assert_msg(covered, "op %s has no dual-tensor case in tests/check_forward.c",
                      nb_op_name(op));
    }
}
END_TEST

/* A dual tensor by hand: y = tanh(x ⊙ x), dy = 2 x (1 - y²) ⊙ v; the
 * primal is x's value (a view), x itself is left without a tangent, and a
 * result no dual reaches has none. */
START_TEST(test_make_dual_values) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(c, NB_F64, NB_SHAPE(3), (double[]){0.1, 0.5, -1});
    nb_tensor *v = nb_from_doubles(c, NB_F64, NB_SHAPE(3), (double[]){1, 2, 3});
    nb_tensor *xd = nb_make_dual(c, x, v);
    ck_assert_ptr_nonnull(xd);
    ck_assert_ptr_eq(nb_tangent(xd), v);
    ck_assert_ptr_null(nb_tangent(x));
    ck_assert_ptr_eq(xd->data, x->data);
    nb_tensor *y = nb_tanh(c, nb_mul(c, xd, xd));
    nb_tensor *other = nb_exp(c, x);
    double want[3];
    for (int i = 0; i < 3; i++) {
        double xi = nb_get(x, i), yi = tanh(xi * xi);
        want[i] = 2 * xi * (1 - yi * yi) * nb_get(v, i);
    }
    ck_assert_tensor_near(nb_tangent(y), want, 3, 1e-15);
    ck_assert_ptr_null(nb_tangent(other));
    /* with grad off, the same tangent, and nothing on the tape */
    nb_set_grad_enabled(c, false);
    int len = nb_tape_len(c);
    nb_tensor *y2 = nb_tanh(c, nb_mul(c, xd, xd));
    ck_assert_tensor_near(nb_tangent(y2), want, 3, 1e-15);
    ck_assert_int_eq(nb_tape_len(c), len);
    nb_ctx_free(c);
}
END_TEST

/* ---- composition with reverse mode ------------------------------------------ */
/* a small network: sum(log_softmax(layer_norm(tanh(x W1)) W2) ⊙ c) + an
 * attention output, scalar */
static nb_tensor *f_net(nb_ctx *c, nb_tensor *const *x, void *u) {
    (void)u;
    nb_tensor *h = nb_tanh(c, nb_matmul(c, x[0], x[1]));          /* (4,3) */
    h = nb_layer_norm(c, h, NULL, NULL, 1e-5);
    nb_tensor *z = nb_log_softmax(c, nb_matmul(c, h, x[2]));      /* (4,5) */
    nb_tensor *q = nb_reshape(c, nb_gelu(c, x[0], NB_GELU_TANH), NB_SHAPE(1, 4, 1, 2));
    nb_tensor *a = nb_sdpa(c, q, q, q, NULL, true, 0.7, 0.0, 0);   /* (1,4,2) */
    return nb_add(c, nb_sum(c, nb_mul(c, z, z)), nb_sum(c, nb_mul(c, a, a)));
}

/* Forward-over-reverse (nb_hvp's NB_HVP_FWD_REV, and NB_HVP_AUTO's pick),
 * reverse-over-forward (the gradient of a dual forward's tangent) and
 * reverse-over-reverse (NB_HVP_REV_REV, and by hand) agree within 1e-12;
 * nb_hvp_last_method names the way each nb_hvp took. */
START_TEST(test_hvp_three_ways) {
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 36, 3);
    int64_t shapes[3][2] = {{4, 2}, {2, 3}, {3, 5}};
    nb_tensor *x[3], *v[3], *hv[3], *g[3], *rr[3], *rf[3];
    for (int i = 0; i < 3; i++) {
        x[i] = nb_requires_grad(nb_normal(c, NB_F64, 2, shapes[i], 0, 1, &rng));
        v[i] = nb_normal(c, NB_F64, 2, shapes[i], 0, 1, &rng);
    }
    nb_tensor *y = f_net(c, x, NULL), *hr[3];
    ck_assert_int_eq(nb_hvp_last_method(c), NB_HVP_AUTO); /* none yet */
    ck_assert_int_eq(nb_hvp(c, y, 3, x, v, &(nb_grad_opts){.hvp_mode = NB_HVP_FWD_REV}, hv),
                     NB_OK);
    ck_assert_int_eq(nb_hvp_last_method(c), NB_HVP_FWD_REV);
    ck_assert_int_eq(nb_hvp(c, y, 3, x, v, &(nb_grad_opts){.hvp_mode = NB_HVP_REV_REV}, hr),
                     NB_OK);
    ck_assert_int_eq(nb_hvp_last_method(c), NB_HVP_REV_REV);
    nb_tensor *ha[3]; /* NB_HVP_AUTO: every op here has a forward-mode rule */
    ck_assert_int_eq(nb_hvp(c, y, 3, x, v, NULL, ha), NB_OK);
    ck_assert_int_eq(nb_hvp_last_method(c), NB_HVP_FWD_REV);
    nb_tensor *bad[3];
    ck_assert_int_eq(nb_hvp(c, y, 3, x, v, &(nb_grad_opts){.hvp_mode = (nb_hvp_mode)7}, bad),
                     NB_ERR_VALUE);
    ck_assert_error_has(c, "hvp_mode 7");
    nb_ctx_clear_error(c);
    /* reverse-over-reverse: the gradient of <dy/dx, v> */
    nb_grad_opts cg = {.create_graph = true};
    ck_assert_int_eq(nb_grad(c, 1, &y, NULL, 3, x, &cg, g), NB_OK);
    nb_tensor *s = NULL;
    for (int i = 0; i < 3; i++) {
        nb_tensor *term = nb_sum(c, nb_mul(c, g[i], v[i]));
        s = s ? nb_add(c, s, term) : term;
    }
    ck_assert_int_eq(nb_grad(c, 1, &s, NULL, 3, x, NULL, rr), NB_OK);
    /* reverse-over-forward: the gradient of the tangent of f(dual(x, v)) */
    nb_tensor *out, *tan;
    ck_assert_int_eq(nb_jvp_fwd(c, f_net, NULL, 3, x, v, &out, &tan), NB_OK);
    ck_assert(tan->requires_grad);
    ck_assert_int_eq(nb_grad(c, 1, &tan, NULL, 3, x, NULL, rf), NB_OK);
    for (int i = 0; i < 3; i++)
        for (size_t k = 0; k < x[i]->numel; k++) {
            double want = nb_get(rr[i], k);
            ck_assert_double_eq_tol(nb_get(hv[i], k), want, 1e-12);
            ck_assert_double_eq(nb_get(ha[i], k), nb_get(hv[i], k)); /* AUTO took FWD_REV */
            ck_assert_double_eq(nb_get(hr[i], k), want); /* the same computation */
            ck_assert_double_eq_tol(nb_get(rf[i], k), want, 1e-12);
        }
    ck_assert_double_gt(fabs(nb_get(rr[0], 0)), 1e-6); /* not all zero */
    /* nb_jvp (forward mode along the tape) is the dual forward's tangent */
    nb_tensor *ju;
    ck_assert_int_eq(nb_jvp(c, 1, &y, 3, x, v, NULL, &ju), NB_OK);
    ck_assert_double_eq_tol(nb_item(ju), nb_item(tan), 1e-12);
    nb_ctx_free(c);
}
END_TEST

/* ---- through whole models ------------------------------------------------------- */
/* 0 nanoGPT (biases, exact GELU), 1 GPTModel (qkv biases, tanh GELU),
 * 2 Llama 3 (GQA 4/2, scaled RoPE, tied head), 3 Qwen3 (qk_norm, window 3),
 * 4 Qwen3-MoE (top-2 of 4 experts); tiny, f64. */
static nb_gpt_config model_spec(int i) {
    static const nb_gpt_arch arch[5] = {NB_GPT_NANOGPT, NB_GPT_GPTMODEL, NB_GPT_LLAMA3,
                                        NB_GPT_QWEN3, NB_GPT_QWEN3};
    nb_gpt_config c = nb_gpt_config_default(arch[i]);
    c.vocab_size = 11, c.block_size = 8, c.n_layer = 2, c.n_head = 4, c.n_embd = 16;
    c.dropout = 0.0, c.dtype = NB_F64, c.bias = true, c.qkv_bias = true;
    c.n_kv_head = 2, c.head_dim = 0, c.hidden_dim = 24, c.window = 0;
    if (i == 2) c.rope_scaling = (nb_rope_scaling){4.0, 1.0, 8.0, 16}, c.tie_head = true;
    if (i >= 3) c.head_dim = 6, c.qk_norm = true, c.window = 3, c.tie_head = false;
    if (i == 4) c.n_expert = 4, c.n_expert_per_tok = 2, c.moe_hidden_dim = 5, c.hidden_dim = 0;
    return c;
}

/* The tangent of the loss at the parameters along v (every parameter's
 * struct holds its dual for the call, as a model reads its parameters),
 * with recording on or off. */
static double model_jvp(nb_ctx *c, nb_gpt *m, nb_tensor *ids, nb_tensor *tg, nb_tensor **v,
                        bool record) {
    nb_tensor saved[64];
    int n = m->params.n;
    ck_assert_int_le(n, 64);
    nb_ctx_reset(c);
    bool was = nb_set_grad_enabled(c, record);
    for (int j = 0; j < n; j++) {
        nb_tensor *w = nb_list_tensor(&m->params, j);
        nb_tensor *d = nb_make_dual(c, w, v[j]);
        ck_assert_ptr_nonnull(d);
        saved[j] = *w, *w = *d;
    }
    nb_tensor *t = nb_tangent(nb_gpt_loss(c, m, ids, tg, NULL));
    for (int j = 0; j < n; j++) *nb_list_tensor(&m->params, j) = saved[j];
    nb_set_grad_enabled(c, was);
    ck_assert_msg(nb_ctx_status(c) == NB_OK, "%s", nb_ctx_error(c));
    ck_assert_msg(t != NULL, "no tangent reached the loss (record %d)", record);
    return nb_item(t);
}

/* A JVP of a model's loss with recording off (the models' unrecorded fast
 * paths: the few-row dot kernel, the fused projections) equals the one with
 * recording on and <grad, v> from reverse mode, for every layout, with many
 * rows (2 x 8) and with few (1 x 4, the sampling kernel's case). */
START_TEST(test_dual_through_models) {
    int i = _i;
    nb_ctx *p = nb_ctx_new(0), *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 36, (uint64_t)i);
    nb_gpt_config cfg = model_spec(i);
    nb_gpt m;
    ck_assert_msg(nb_gpt_init(p, &m, &cfg, &rng) == NB_OK, "%s", nb_ctx_error(p));
    nb_gpt_train(&m, false);
    nb_tensor *v[64];
    for (int j = 0; j < m.params.n; j++) {
        nb_tensor *w = nb_list_tensor(&m.params, j);
        v[j] = nb_normal(p, NB_F64, w->ndim, w->shape, 0, 1, &rng);
    }
    const int64_t bt[2][2] = {{2, 8}, {1, 4}};
    for (int s = 0; s < 2; s++) {
        nb_tensor *ids = nb_zeros(p, NB_I64, 2, bt[s]), *tg = nb_zeros(p, NB_I64, 2, bt[s]);
        for (size_t k = 0; k < ids->numel; k++) {
            nb_set(ids, k, nb_pcg32_next(&rng) % 11);
            nb_set(tg, k, nb_pcg32_next(&rng) % 11);
        }
        double off = model_jvp(c, &m, ids, tg, v, false), on = model_jvp(c, &m, ids, tg, v, true);
        nb_ctx_reset(c);
        nb_tensor *loss = nb_gpt_loss(c, &m, ids, tg, NULL), *g[64];
        ck_assert_int_eq(nb_grad(c, 1, &loss, NULL, m.params.n,
                                 (nb_tensor *const *)m.params.t,
                                 &(nb_grad_opts){.allow_unused = true}, g), NB_OK);
        double dot = 0; /* an expert no token chose has no gradient: 0 */
        for (int j = 0; j < m.params.n; j++)
            for (size_t k = 0; g[j] && k < v[j]->numel; k++)
                dot += nb_get(g[j], k) * nb_get(v[j], k);
        ck_assert_double_gt(fabs(dot), 1e-3);
        ck_assert_msg(fabs(off - on) <= 1e-12 * fabs(dot) && fabs(off - dot) <= 1e-10 * fabs(dot),
                      "model %d, %lld x %lld: off %.17g on %.17g <grad, v> %.17g", i,
                      (long long)bt[s][0], (long long)bt[s][1], off, on, dot);
    }
    nb_gpt_free(&m);
    nb_ctx_free(c), nb_ctx_free(p);
}
END_TEST

/* ---- fused tangent kernels ------------------------------------------------------- */
/* op k of x, w, b: 0 layer_norm with gain and bias, 1 layer_norm without,
 * 2 rms_norm with gain, 3 rms_norm without */
static nb_tensor *norm_op(nb_ctx *c, int k, nb_tensor *const *x) {
    switch (k) {
    case 0: return nb_layer_norm(c, x[0], x[1], x[2], 1e-5);
    case 1: return nb_layer_norm(c, x[0], NULL, NULL, 1e-5);
    case 2: return nb_rms_norm(c, x[0], x[1], 1e-6);
    default: return nb_rms_norm(c, x[0], NULL, 1e-6);
    }
}

/* The norms' one-pass tangent (used when nothing records it) equals their
 * rule's recorded ops (used when grad is on and an input requires grad)
 * within 1e-12 in f64, with tangents on every input and on some. */
START_TEST(test_fused_norm_tangents) {
    nb_ctx *c = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 36, 9);
    const int64_t D = 7;
    nb_tensor *x[3], *v[3];
    x[0] = nb_normal(c, NB_F64, NB_SHAPE(3, 4, D), 0.5, 2, &rng);
    x[1] = nb_normal(c, NB_F64, NB_SHAPE(D), 1, 0.5, &rng);
    x[2] = nb_normal(c, NB_F64, NB_SHAPE(D), 0, 1, &rng);
    for (int i = 0; i < 3; i++) v[i] = nb_normal(c, NB_F64, x[i]->ndim, x[i]->shape, 0, 1, &rng);
    for (int k = 0; k < 4; k++)
        for (int mask = 1; mask < 8; mask++) { /* which inputs carry a tangent */
            nb_tensor *t[2];
            for (int rec = 0; rec < 2; rec++) {
                nb_set_grad_enabled(c, rec);
                nb_tensor *d[3];
                for (int i = 0; i < 3; i++) {
                    nb_tensor *p = rec ? nb_requires_grad(nb_copy(c, x[i], NB_F64)) : x[i];
                    d[i] = mask >> i & 1 ? nb_make_dual(c, p, v[i]) : p;
                }
                int len = nb_tape_len(c);
                t[rec] = nb_tangent(norm_op(c, k, d));
                /* the fused kernel records nothing */
                ck_assert(rec ? nb_tape_len(c) > len : nb_tape_len(c) == len);
            }
            nb_set_grad_enabled(c, true);
            int used = k == 0 ? 7 : k == 2 ? 3 : 1; /* the inputs the op reads */
            if (!(mask & used)) { /* none of them carries a tangent */
                ck_assert_ptr_null(t[0]);
                ck_assert_ptr_null(t[1]);
                continue;
            }
            ck_assert_msg(t[0] && t[1], "op %d mask %d: no tangent", k, mask);
            /* recorded when it depends on x (a bias tangent alone does not) */
            ck_assert(!t[0]->requires_grad && t[1]->requires_grad == ((mask & used & 3) != 0));
            double scale = 0;
            for (size_t e = 0; e < t[1]->numel; e++) scale = fmax(scale, fabs(nb_get(t[1], e)));
            ck_assert_double_gt(scale, 1e-3);
            for (size_t e = 0; e < t[1]->numel; e++)
                ck_assert_msg(fabs(nb_get(t[0], e) - nb_get(t[1], e)) <= 1e-12 * scale,
                              "op %d mask %d element %zu: fused %.17g rule %.17g", k, mask, e,
                              nb_get(t[0], e), nb_get(t[1], e));
        }
    nb_ctx_free(c);
}
END_TEST

/* ---- custom ops ------------------------------------------------------------------ */
static void cube_backward(nb_ctx *ctx, nb_node *n) {
    nb_tensor *x = nb_node_input(n, 0), *y = nb_node_output(n);
    double *gx = nb_grad_buffer(ctx, x);
    const double *gy = y->grad, *xs = x->data;
    for (size_t i = 0; gx && i < x->numel; i++) gx[i] += 3 * xs[i] * xs[i] * gy[i];
}

static nb_tensor *cube_forward_right(nb_ctx *ctx, nb_node *n, nb_tensor *const *t) {
    nb_tensor *x = nb_node_input(n, 0);
    return t[0] ? nb_mul(ctx, t[0], nb_scale(ctx, nb_mul(ctx, x, x), 3)) : NULL;
}

/* the planted mistake: 2x^2 instead of 3x^2 */
static nb_tensor *cube_forward_wrong(nb_ctx *ctx, nb_node *n, nb_tensor *const *t) {
    nb_tensor *x = nb_node_input(n, 0);
    return t[0] ? nb_mul(ctx, t[0], nb_scale(ctx, nb_mul(ctx, x, x), 2)) : NULL;
}

/* a rule returning a tangent of the wrong shape */
static nb_tensor *cube_forward_shape(nb_ctx *ctx, nb_node *n, nb_tensor *const *t) {
    (void)n, (void)t;
    return nb_zeros(ctx, NB_F64, NB_SHAPE(7));
}

static nb_forward_fn cube_rule;

static nb_tensor *cube(nb_ctx *ctx, nb_tensor *x) {
    nb_tensor *y = nb_empty(ctx, x->dtype, x->ndim, x->shape);
    for (size_t i = 0; i < x->numel; i++) nb_set(y, i, pow(nb_get(x, i), 3));
    nb_node *n = nb_record(ctx, "cube", y, 1, &x, cube_backward, NULL);
    nb_node_set_forward_rule(n, cube_rule);
    return y;
}

static nb_tensor *f_cube(nb_ctx *ctx, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_sum(ctx, nb_tanh(ctx, cube(ctx, nb_scale(ctx, in[0], 1.5))));
}

START_TEST(test_custom_op_forward_rule) {
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *x = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){0.5, -2});
    nb_tensor *v = nb_from_doubles(c, NB_F64, NB_SHAPE(2), (double[]){1, 0.25});
    cube_rule = cube_forward_right; /* with grad off too: the node is made for the rule */
    nb_set_grad_enabled(c, false);
    nb_tensor *t = nb_tangent(cube(c, nb_make_dual(c, x, v)));
    ck_assert_tensor_near(t, ((double[]){3 * 0.25, 3 * 4 * 0.25}), 2, 1e-15);
    ck_assert_int_eq(nb_tape_len(c), 0);
    nb_set_grad_enabled(c, true);
    /* none declared: an error naming the op and the call to make */
    cube_rule = NULL;
    ck_assert_ptr_null(nb_tangent(cube(c, nb_make_dual(c, x, v))));
    ck_assert_int_eq(nb_ctx_status(c), NB_ERR_STATE);
    ck_assert_error_has(c, "custom op 'cube'");
    ck_assert_error_has(c, "nb_node_set_forward_rule");
    nb_ctx_clear_error(c);
    nb_tensor *y, *ty;
    ck_assert_int_eq(nb_jvp_fwd(c, f_cube, NULL, 1, &x, &v, &y, &ty), NB_ERR_STATE);
    ck_assert_error_has(c, "custom op 'cube'");
    nb_ctx_clear_error(c);
    /* a tangent of the wrong shape is named too */
    cube_rule = cube_forward_shape;
    ck_assert_int_eq(nb_jvp_fwd(c, f_cube, NULL, 1, &x, &v, &y, &ty), NB_ERR_SHAPE);
    ck_assert_error_has(c, "forward-mode rule of op 'cube'");
    ck_assert_error_has(c, "gave a tangent (7) f64, expected its output's (2) f64");
    nb_ctx_clear_error(c);
    /* asked for forward-over-reverse: H v of sum(x²) is 2 v */
    cube_rule = NULL;
    nb_tensor *xg = nb_requires_grad(nb_copy(c, x, NB_F64)), *hv;
    ck_assert_ptr_nonnull(cube(c, xg)); /* on the tape before s, without a forward-mode rule */
    nb_tensor *s = nb_sum(c, nb_mul(c, xg, xg));
    nb_grad_opts fr = {.hvp_mode = NB_HVP_FWD_REV};
    ck_assert_int_eq(nb_hvp(c, s, 1, &xg, &v, &fr, &hv), NB_OK);
    ck_assert_tensor_near(hv, ((double[]){2, 0.5}), 2, 1e-15);
    /* the tape holds the rule-less cube: reverse-over-reverse, and said so,
     * whether forward-over-reverse was asked for or left to NB_HVP_AUTO */
    ck_assert_int_eq(nb_hvp_last_method(c), NB_HVP_REV_REV);
    ck_assert_int_eq(nb_hvp(c, s, 1, &xg, &v, NULL, &hv), NB_OK);
    ck_assert_int_eq(nb_hvp_last_method(c), NB_HVP_REV_REV);
    ck_assert_tensor_near(hv, ((double[]){2, 0.5}), 2, 1e-15);
    nb_ctx_free(c);
}
END_TEST

/* check_forward_ad: the right rule passes, the planted wrong one fails with
 * the op named, while the reverse check alone passes. */
START_TEST(test_check_forward_ad_names_a_wrong_rule) {
    nb_ctx *c = nb_ctx_new(0), *k1 = nb_ctx_new(0), *k2 = nb_ctx_new(0), *k3 = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(
        nb_from_doubles(c, NB_F64, NB_SHAPE(4), (double[]){0.3, -0.7, 0.9, 0.1}));
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.check_forward_ad = true;
    nb_gradcheck_result r;
    cube_rule = cube_forward_right;
    ck_assert_int_eq(nb_gradcheck(k1, f_cube, NULL, 1, &x, &o, &r), NB_OK);
    ck_assert(r.passed && r.backward_passed && r.forward_passed);
    ck_assert_double_lt(r.forward_max_abs_err, 1e-8);
    ck_assert_double_gt(r.forward_max_abs_err, 0.0);
    cube_rule = cube_forward_wrong;
    ck_assert_int_eq(nb_gradcheck(k2, f_cube, NULL, 1, &x, NULL, &r), NB_OK); /* reverse only */
    ck_assert_int_eq(nb_gradcheck(k2, f_cube, NULL, 1, &x, &o, &r), NB_ERR_VALUE);
    ck_assert(!r.passed && r.backward_passed && !r.forward_passed);
    ck_assert_str_eq(r.forward_blame_op, "cube");
    ck_assert_int_eq(r.forward_blame_index, 1); /* after the scale, #0 */
    ck_assert_ptr_nonnull(strstr(r.message, "forward-mode rule of op #1 'cube'"));
    ck_assert_error_has(k2, "'cube'");
    o.fast = true; /* fast mode's directions find it too */
    ck_assert_int_eq(nb_gradcheck(k3, f_cube, NULL, 1, &x, &o, &r), NB_ERR_VALUE);
    ck_assert_msg(!strcmp(r.forward_blame_op, "cube"), "%s", r.message);
    cube_rule = NULL;
    nb_ctx_free(c), nb_ctx_free(k1), nb_ctx_free(k2), nb_ctx_free(k3);
}
END_TEST

Suite *suite_forward(void) {
    Suite *s = suite_create("forward");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_dual_every_row_op);
    tcase_add_test(tc, test_dual_every_hand_op);
    tcase_add_test(tc, test_make_dual_values);
    tcase_add_test(tc, test_hvp_three_ways);
    tcase_add_test(tc, test_custom_op_forward_rule);
    tcase_add_test(tc, test_check_forward_ad_names_a_wrong_rule);
    tcase_add_loop_test(tc, test_dual_through_models, 0, 5);
    tcase_add_test(tc, test_fused_norm_tangents);
    suite_add_tcase(s, tc);
    return s;
}
