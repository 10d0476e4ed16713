/* nabla-gradcheck - float64 finite-difference check of every differentiable
 * op and module, one line each, then "N passed, M failed". Exit status 1 if
 * any fails. `make gradcheck` runs it. Three columns: the reverse-mode
 * gradient (gradcheck), the second order (gradgradcheck) and the forward-
 * mode JVPs (gradcheck's check_forward_ad: each op's forward-mode rule).
 *
 * Each case names a function of its inputs, the inputs' shapes and how to
 * draw them. Inputs come from PCG32 (seed 2024) and are kept away from kinks:
 * `away` draws |x| in [0.2, 1] with a random sign, so relu, max and friends
 * are never evaluated within eps of a non-differentiable point.
 *
 * Modules are checked with respect to their input and every parameter with
 * nb_gradcheck_params (PyTorch's gradcheck(layer, params + inputs)). Dropout
 * in train mode gets its rng re-seeded on every evaluation, so the mask is
 * fixed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"
#include "op_rows.h"

/* The case tables below leave trailing fields out where they are zero. */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

typedef enum { IN_UNIFORM, IN_AWAY, IN_POSITIVE, IN_CLASSES, IN_MASK } in_kind;

typedef struct in_spec {
    in_kind kind;
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    int64_t classes; /* IN_CLASSES: targets in [0, classes) */
} in_spec;

typedef struct gc_case {
    const char *op;   /* the op or module under test */
    const char *what; /* the shapes or variant */
    nb_gradcheck_fn fn;
    int n_in;
    in_spec in[4];
    bool fast;        /* v^T J u instead of the full Jacobian (big inputs) */
} gc_case;

#define S1(a) 1, {a}
#define S2(a, b) 2, {a, b}
#define S3(a, b, c) 3, {a, b, c}
#define S4(a, b, c, d) 4, {a, b, c, d}
#define S5(a, b, c, d, e) 5, {a, b, c, d, e}
#define S6(a, b, c, d, e, f) 6, {a, b, c, d, e, f}

/* ---- the functions under test ---------------------------------------------- */
#define F1(name, expr)                                                            \
    static nb_tensor *name(nb_ctx *c, nb_tensor *const *in, void *u) {          \
        (void)u;                                                                  \
        return expr;                                                              \
    }

F1(f_pow, nb_pow(c, in[0], 2.5))
F1(f_gelu, nb_gelu(c, in[0], NB_GELU_NONE))
F1(f_gelu_tanh, nb_gelu(c, in[0], NB_GELU_TANH))
F1(f_sum_dim, nb_sum_dim(c, in[0], 1, false))
F1(f_sum_dim_keep, nb_sum_dim(c, in[0], -1, true))
F1(f_mean_dim, nb_mean_dim(c, in[0], 0, true))
F1(f_max_dim, nb_max_dim(c, in[0], -1, false, NULL))
F1(f_topk, nb_topk(c, in[0], 3, 1, NULL))
F1(f_topk_sorted, nb_topk(c, in[0], 18, -1, NULL)) /* k > 16: the sorting path */
F1(f_index_select, nb_index_select(c, in[0], in[1]))
F1(f_index_add, nb_index_add(c, in[0], in[1], in[2]))
F1(f_transpose, nb_transpose(c, in[0], 1, 2))
F1(f_permute, nb_permute(c, in[0], (const int[]){2, 0, 3, 1}))
F1(f_permute_6d, nb_permute(c, in[0], (const int[]){5, 0, 3, 1, 4, 2}))
F1(f_reshape, nb_reshape(c, in[0], NB_SHAPE(3, -1)))
F1(f_concat, nb_concat(c, 3, in, 1))
F1(f_masked_fill, nb_masked_fill(c, in[0], in[1], -2.0))
F1(f_causal_fill, nb_softmax(c, nb_causal_fill(c, in[0], -INFINITY)))
F1(f_cross_entropy, nb_cross_entropy(c, in[0], in[1]))
F1(f_grouped_linear, nb_grouped_linear(c, in[0], 3, in + 1, (const int64_t[]){2, 0, 3}))
F1(f_linear, nb_linear(c, in[0], in[1], in[2]))
F1(f_linear_nobias, nb_linear(c, in[0], in[1], NULL))
F1(f_embedding, nb_embedding(c, in[0], in[1]))
F1(f_layer_norm, nb_layer_norm(c, in[0], in[1], in[2], 1e-5))
F1(f_rms_norm, nb_rms_norm(c, in[0], in[1], 1e-5))
F1(f_rms_norm_plain, nb_rms_norm(c, in[0], NULL, 1e-3))
F1(f_sdpa, nb_sdpa(c, in[0], in[1], in[2], NULL, true, 0.6, 0.0, 0))
F1(f_sdpa_masked, nb_sdpa(c, in[0], in[1], in[2], in[3], true, 0.6, 0.0, 0))
F1(f_sdpa_dropout, nb_sdpa(c, in[0], in[1], in[2], NULL, false, 0.6, 0.3, 2024)) /* fixed mask */
F1(f_sdpa_window,
   nb_sdpa_ex(c, in[0], in[1], in[2], &(nb_sdpa_opts){.causal = true, .scale = 0.6, .window = 3}))
F1(f_sdpa_window70,
   nb_sdpa_ex(c, in[0], in[1], in[2], &(nb_sdpa_opts){.causal = true, .window = 70}))
F1(f_sdpa_window_masked, /* a fixed dropout mask */
   nb_sdpa_ex(c, in[0], in[1], in[2],
              &(nb_sdpa_opts){.key_padding_mask = in[3], .causal = true, .scale = 0.6,
                              .window = 2, .dropout_p = 0.2, .seed = 7}))

static nb_tensor *f_split(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    nb_tensor *parts[3];
    if (nb_split(c, in[0], 1, 3, (const int64_t[]){1, 3, 2}, parts) != NB_OK) return NULL;
    /* weight the pieces differently so a mix-up shows */
    return nb_add(c, nb_sum(c, nb_scale(c, parts[0], 2.0)),
                  nb_add(c, nb_sum(c, nb_mul(c, parts[1], parts[1])), nb_sum(c, parts[2])));
}

static nb_tensor *f_dropout(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    nb_pcg32 rng; /* the same mask on every evaluation */
    nb_pcg32_seed(&rng, 7, 1);
    return nb_dropout(c, in[0], 0.4, true, &rng);
}

/* rope's tables: any values (the op is its formula for any tables, so the
 * transpose is checked in full), fixed across evaluations; or
 * nb_rope_tables' with Llama 3's scaling */
static nb_tensor *rope_table(nb_ctx *c, const nb_tensor *x, uint64_t which) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 31, which);
    return nb_uniform(c, NB_F64, NB_SHAPE(9, x->shape[x->ndim - 1]), -1.0, 1.0, &rng);
}
static nb_tensor *f_rope(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_rope(c, in[0], rope_table(c, in[0], 1), rope_table(c, in[0], 2), 0, 0);
}
static nb_tensor *f_rope_thd(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_rope(c, in[0], rope_table(c, in[0], 3), rope_table(c, in[0], 4), 3, NB_ROPE_THD);
}
static nb_tensor *f_rope_interleaved(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    return nb_rope(c, in[0], rope_table(c, in[0], 5), rope_table(c, in[0], 6), 2,
                   NB_ROPE_INTERLEAVED);
}
static nb_tensor *f_rope_llama3(nb_ctx *c, nb_tensor *const *in, void *u) {
    (void)u;
    const nb_rope_scaling llama3 = {32, 1, 4, 8};
    nb_tensor *cos = NULL, *sin = NULL;
    if (nb_rope_tables(c, 6, 12, 10.0, &llama3, NB_F64, &cos, &sin)) return NULL;
    return nb_rope(c, in[0], cos, sin, 5, NB_ROPE_THD | NB_ROPE_INTERLEAVED);
}

static const gc_case cases[] = {
    {"mul", "(2,1,3,1,2) * (2,1,2,1) 5-D", nb_row_mul, 2, {{IN_UNIFORM, S5(2, 1, 3, 1, 2)}, {IN_UNIFORM, S4(2, 1, 2, 1)}}},
    {"pow", "(2,3) ** 2.5", f_pow, 1, {{IN_POSITIVE, S2(2, 3)}}},
    {"gelu", "(2,3) approximate=none", f_gelu, 1, {{IN_UNIFORM, S2(2, 3)}}},
    {"gelu", "(2,3) approximate=tanh", f_gelu_tanh, 1, {{IN_UNIFORM, S2(2, 3)}}},
    {"sum_dim", "(2,3,4) dim 1", f_sum_dim, 1, {{IN_UNIFORM, S3(2, 3, 4)}}},
    {"sum_dim", "(2,3,4) dim -1 keepdim", f_sum_dim_keep, 1, {{IN_UNIFORM, S3(2, 3, 4)}}},
    {"mean_dim", "(3,4) dim 0 keepdim", f_mean_dim, 1, {{IN_UNIFORM, S2(3, 4)}}},
    {"max_dim", "(3,5) dim -1", f_max_dim, 1, {{IN_UNIFORM, S2(3, 5)}}},
    {"topk", "(2,5,3) k 3 dim 1", f_topk, 1, {{IN_UNIFORM, S3(2, 5, 3)}}},
    {"topk", "(2,20) k 18 dim -1", f_topk_sorted, 1, {{IN_UNIFORM, S2(2, 20)}}},
    {"index_select", "x (5,2,3) idx (7) of 5", f_index_select, 2, {{IN_UNIFORM, S3(5, 2, 3)}, {IN_CLASSES, S1(7), 5}}},
    {"index_add", "base (4,3) idx (6) of 4, src (6,3)", f_index_add, 3, {{IN_UNIFORM, S2(4, 3)}, {IN_CLASSES, S1(6), 4}, {IN_UNIFORM, S2(6, 3)}}},
    {"matmul", "(2,3,4,3) @ (3,5) batched", nb_row_matmul, 2, {{IN_UNIFORM, S4(2, 3, 4, 3)}, {IN_UNIFORM, S2(3, 5)}}},
    {"matmul", "(2,1,3,4) @ (3,4,2) broadcast", nb_row_matmul, 2, {{IN_UNIFORM, S4(2, 1, 3, 4)}, {IN_UNIFORM, S3(3, 4, 2)}}},
    {"matmul", "(2,1,2,2,3) @ (2,1,3,2) 5-D", nb_row_matmul, 2, {{IN_UNIFORM, S5(2, 1, 2, 2, 3)}, {IN_UNIFORM, S4(2, 1, 3, 2)}}},
    {"transpose", "(2,3,4) dims 1,2", f_transpose, 1, {{IN_UNIFORM, S3(2, 3, 4)}}},
    {"permute", "(2,3,4,5) to (2,0,3,1)", f_permute, 1, {{IN_UNIFORM, S4(2, 3, 4, 5)}}, true},
    {"permute", "(2,1,3,2,1,2) 6-D", f_permute_6d, 1, {{IN_UNIFORM, S6(2, 1, 3, 2, 1, 2)}}},
    {"reshape", "(2,3,2) to (3,-1)", f_reshape, 1, {{IN_UNIFORM, S3(2, 3, 2)}}},
    {"concat", "3 x (2,k,3) dim 1", f_concat, 3, {{IN_UNIFORM, S3(2, 1, 3)}, {IN_UNIFORM, S3(2, 2, 3)}, {IN_UNIFORM, S3(2, 3, 3)}}},
    {"split", "(2,6) into 1,3,2", f_split, 1, {{IN_UNIFORM, S2(2, 6)}}},
    {"masked_fill", "(2,3,4) mask (3,4)", f_masked_fill, 2, {{IN_UNIFORM, S3(2, 3, 4)}, {IN_MASK, S2(3, 4)}}},
    {"causal_fill", "(2,4,4) -inf then softmax", f_causal_fill, 1, {{IN_UNIFORM, S3(2, 4, 4)}}},
    {"cross_entropy", "(4,5) targets (4)", f_cross_entropy, 2, {{IN_UNIFORM, S2(4, 5)}, {IN_CLASSES, S1(4), 5}}},
    {"grouped_linear", "x (5,4) rows 2,0,3 W 3 x (3,4)", f_grouped_linear, 4, {{IN_UNIFORM, S2(5, 4)}, {IN_UNIFORM, S2(3, 4)}, {IN_UNIFORM, S2(3, 4)}, {IN_UNIFORM, S2(3, 4)}}},
    {"linear", "(2,3,4) W(5,4) b(5)", f_linear, 3, {{IN_UNIFORM, S3(2, 3, 4)}, {IN_UNIFORM, S2(5, 4)}, {IN_UNIFORM, S1(5)}}},
    {"linear", "(3,4) W(2,4) no bias", f_linear_nobias, 2, {{IN_UNIFORM, S2(3, 4)}, {IN_UNIFORM, S2(2, 4)}}},
    {"dropout", "(4,5) p=0.4 fixed mask", f_dropout, 1, {{IN_UNIFORM, S2(4, 5)}}},
    {"embedding", "W(6,3) ids (2,4)", f_embedding, 2, {{IN_UNIFORM, S2(6, 3)}, {IN_CLASSES, S2(2, 4), 6}}},
    {"layer_norm", "(2,3,5) affine", f_layer_norm, 3, {{IN_UNIFORM, S3(2, 3, 5)}, {IN_UNIFORM, S1(5)}, {IN_UNIFORM, S1(5)}}},
    {"rms_norm", "(2,3,5) weight", f_rms_norm, 2, {{IN_UNIFORM, S3(2, 3, 5)}, {IN_UNIFORM, S1(5)}}},
    {"rms_norm", "(3,4) no weight, eps 1e-3", f_rms_norm_plain, 1, {{IN_UNIFORM, S2(3, 4)}}},
    {"sdpa", "q,k (2,5,2,3) v (2,5,2,4) causal", f_sdpa, 3, {{IN_UNIFORM, S4(2, 5, 2, 3)}, {IN_UNIFORM, S4(2, 5, 2, 3)}, {IN_UNIFORM, S4(2, 5, 2, 4)}}},
    {"sdpa", "causal + key padding mask (2,5)", f_sdpa_masked, 4, {{IN_UNIFORM, S4(2, 5, 2, 3)}, {IN_UNIFORM, S4(2, 5, 2, 3)}, {IN_UNIFORM, S4(2, 5, 2, 4)}, {IN_MASK, S2(2, 5)}}},
    {"sdpa", "Tq 4, Tk 6, dropout 0.3 fixed seed", f_sdpa_dropout, 3, {{IN_UNIFORM, S4(2, 4, 2, 3)}, {IN_UNIFORM, S4(2, 6, 2, 3)}, {IN_UNIFORM, S4(2, 6, 2, 2)}}},
    {"sdpa", "(1,70,2,4) causal, 2x2 tiles", f_sdpa, 3, {{IN_UNIFORM, S4(1, 70, 2, 4)}, {IN_UNIFORM, S4(1, 70, 2, 4)}, {IN_UNIFORM, S4(1, 70, 2, 4)}}, true},
    {"sdpa", "GQA (2,5,4,3), k,v Hkv 1 (MQA)", f_sdpa, 3, {{IN_UNIFORM, S4(2, 5, 4, 3)}, {IN_UNIFORM, S4(2, 5, 1, 3)}, {IN_UNIFORM, S4(2, 5, 1, 2)}}},
    {"sdpa", "GQA Hkv 2 of 4, window 3", f_sdpa_window, 3, {{IN_UNIFORM, S4(2, 6, 4, 3)}, {IN_UNIFORM, S4(2, 6, 2, 3)}, {IN_UNIFORM, S4(2, 6, 2, 2)}}},
    {"sdpa", "Hkv 2/4, window 2, mask, dropout", f_sdpa_window_masked, 4, {{IN_UNIFORM, S4(2, 5, 4, 3)}, {IN_UNIFORM, S4(2, 5, 2, 3)}, {IN_UNIFORM, S4(2, 5, 2, 2)}, {IN_MASK, S2(2, 5)}}},
    {"sdpa", "(1,140,4,4) Hkv 2, window 70", f_sdpa_window70, 3, {{IN_UNIFORM, S4(1, 140, 4, 4)}, {IN_UNIFORM, S4(1, 140, 2, 4)}, {IN_UNIFORM, S4(1, 140, 2, 4)}}, true},
    {"rope", "(2,5,6) any tables, pos0 0", f_rope, 1, {{IN_UNIFORM, S3(2, 5, 6)}}},
    {"rope", "(2,4,3,4) THD, pos0 3", f_rope_thd, 1, {{IN_UNIFORM, S4(2, 4, 3, 4)}}},
    {"rope", "(3,5,8) interleaved, pos0 2", f_rope_interleaved, 1, {{IN_UNIFORM, S3(3, 5, 8)}}},
    {"rope", "(1,6,2,6) llama3, THD, interleaved", f_rope_llama3, 1, {{IN_UNIFORM, S4(1, 6, 2, 6)}}},
};


/* The ops of the list (nabla/ops.def) with an NB_OP row get their case from
 * it (op_rows.h); an NB_OP_HAND op has a case function f_<name> (an op
 * without one stops the build here, naming it), and main checks that it
 * heads a case in the table above. */
static const nb_gradcheck_fn hand_fn[NB_OP_CUSTOM] = {
#define NB_OP(id, name, n_in, formula, ...)
#define NB_OP_HAND(id, name, n_in, formula, tangent) [NB_OP_##id] = f_##name,
#include "nabla/ops.def"
#undef NB_OP
#undef NB_OP_HAND
};

/* The first hand-written op of the list without a case in cases[], or -1. */
static int op_without_case(void) {
    for (int op = 0; op < NB_OP_CUSTOM; op++) {
        bool found = !hand_fn[op];
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
            found = found || (cases[k].fn == hand_fn[op] && !strcmp(cases[k].op, nb_op_name(op)));
        if (!found) return op;
    }
    return -1;
}

/* ---- modules ------------------------------------------------------------------ */
typedef union any_module {
    nb_nn_linear linear;
    nb_nn_layer_norm norm;
    nb_nn_rms_norm rms;
    nb_nn_embedding emb;
    nb_nn_self_attention_v1 sa1;
    nb_nn_self_attention_v2 sa2;
    nb_nn_causal_attention ca;
    nb_nn_mha_wrapper wrap;
    nb_nn_mha mha;
    nb_gpt gpt;
} any_module;

typedef struct mod_case {
    const char *name, *what;
    /* builds the module (float64) in pctx; dropout draws from rng */
    nb_status (*init)(any_module *m, nb_ctx *pctx, nb_pcg32 *rng);
    nb_tensor *(*forward)(nb_ctx *ctx, any_module *m, nb_tensor *x);
    nb_tensor_list *(*params)(any_module *m);
    void (*train)(any_module *m, bool on);
    in_spec x;
    bool train_mode; /* dropout on, with a fixed mask */
} mod_case;

typedef struct mod_run {
    const mod_case *c;
    any_module m;
    nb_pcg32 *rng; /* the module's rng, re-seeded per evaluation: a fixed dropout mask */
} mod_run;

/* in[0] is x; the module reads its own parameters. */
static nb_tensor *f_module(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    mod_run *r = user;
    nb_pcg32_seed(r->rng, 99, 7);
    return r->c->forward(ctx, &r->m, in[0]);
}

#define MODULE(T, field)                                                          \
    static nb_tensor_list *T##_params(any_module *m) { return &m->field.params; } \
    static void T##_train(any_module *m, bool on) { nb_nn_##T##_train(&m->field, on); }

MODULE(linear, linear)
MODULE(layer_norm, norm)
MODULE(rms_norm, rms)
MODULE(embedding, emb)
MODULE(self_attention_v1, sa1)
MODULE(self_attention_v2, sa2)
MODULE(causal_attention, ca)
MODULE(mha_wrapper, wrap)
MODULE(mha, mha)

static nb_status i_linear(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_linear_init(p, &m->linear, 4, 3, true, NB_F64, r);
}
static nb_status i_linear_nobias(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_linear_init(p, &m->linear, 4, 3, false, NB_F64, r);
}
static nb_status i_layer_norm(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    (void)r;
    nb_status st = nb_nn_layer_norm_init(p, &m->norm, 5, 1e-5, true, NB_F64);
    /* move weight and bias off 1 and 0 so their gradients are not special */
    for (size_t i = 0; !st && i < 5; i++) {
        nb_set(m->norm.weight, i, 1.0 + 0.1 * (double)i);
        nb_set(m->norm.bias, i, -0.2 + 0.05 * (double)i);
    }
    return st;
}
static nb_status i_rms_norm(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    (void)r;
    nb_status st = nb_nn_rms_norm_init(p, &m->rms, 5, 1e-6, true, NB_F64);
    for (size_t i = 0; !st && i < 5; i++) /* off 1, so its gradient is not special */
        nb_set(m->rms.weight, i, 0.8 + 0.1 * (double)i);
    return st;
}
static nb_status i_embedding(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_embedding_init(p, &m->emb, 6, 3, NB_F64, r);
}
static nb_status i_sa1(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_self_attention_v1_init(p, &m->sa1, 3, 2, NB_F64, r);
}
static nb_status i_sa2(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_self_attention_v2_init(p, &m->sa2, 3, 2, true, NB_F64, r);
}
static nb_status i_causal(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_causal_attention_init(p, &m->ca, 3, 2, 6, 0.5, false, NB_F64, r);
}
static nb_status i_wrapper(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_mha_wrapper_init(p, &m->wrap, 3, 2, 4, 0.5, 2, false, NB_F64, r);
}
static nb_status i_mha(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return nb_nn_mha_init(p, &m->mha, 4, 4, 4, 0.5, 2, true, NB_F64, r);
}

static nb_tensor *m_linear(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_linear_forward(c, &m->linear, x);
}
static nb_tensor *m_layer_norm(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_layer_norm_forward(c, &m->norm, x);
}
static nb_tensor *m_rms_norm(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_rms_norm_forward(c, &m->rms, x);
}
static nb_tensor *m_embedding(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_embedding_forward(c, &m->emb, x);
}
static nb_tensor *m_sa1(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_self_attention_v1_forward(c, &m->sa1, x);
}
static nb_tensor *m_sa2(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_self_attention_v2_forward(c, &m->sa2, x);
}
static nb_tensor *m_causal(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_causal_attention_forward(c, &m->ca, x);
}
static nb_tensor *m_wrapper(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_mha_wrapper_forward(c, &m->wrap, x);
}
static nb_tensor *m_mha(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_nn_mha_forward(c, &m->mha, x);
}
/* the composed ops (matmul, causal_fill, softmax, dropout, matmul) */
static nb_tensor *m_mha_composed(nb_ctx *c, any_module *m, nb_tensor *x) {
    m->mha.use_fused = false;
    return nb_nn_mha_forward(c, &m->mha, x);
}
/* key padding: batch 1 masks its last key, so one query row is fully masked */
static nb_tensor *m_mha_padded(nb_ctx *c, any_module *m, nb_tensor *x) {
    const uint8_t pad[2 * 4] = {0, 0, 0, 0, 1, 0, 0, 1};
    nb_tensor *mask = nb_from_data(c, NB_BOOL, NB_SHAPE(2, 4), pad);
    return nb_nn_mha_forward_masked(c, &m->mha, x, mask, NULL);
}

/* GPT (nabla/gpt.h): V 5, block 4, 2 layers, 2 heads, C 4; logits (B, T, 5) */
static nb_tensor_list *gpt_params(any_module *m) { return &m->gpt.params; }
static void gpt_train(any_module *m, bool on) { nb_gpt_train(&m->gpt, on); }
static nb_status i_gpt_any(any_module *m, nb_ctx *p, nb_pcg32 *r, nb_gpt_arch arch, bool bias) {
    nb_gpt_config cfg = nb_gpt_config_default(arch);
    cfg.vocab_size = 5, cfg.block_size = 4, cfg.n_layer = 2, cfg.n_head = 2, cfg.n_embd = 4;
    cfg.dropout = 0.3, cfg.bias = bias, cfg.qkv_bias = bias, cfg.dtype = NB_F64;
    nb_status st = nb_gpt_init(p, &m->gpt, &cfg, r);
    /* nanoGPT's std 0.02 and the unit LayerNorms: spread the values out */
    for (int k = 0; !st && k < m->gpt.params.n; k++)
        for (size_t i = 0; i < nb_list_tensor(&m->gpt.params, k)->numel; i++)
            nb_set(nb_list_tensor(&m->gpt.params, k), i, 2.0 * nb_pcg32_double(r) - 1.0);
    return st;
}
static nb_status i_gptmodel(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return i_gpt_any(m, p, r, NB_GPT_GPTMODEL, true);
}
static nb_status i_nanogpt(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return i_gpt_any(m, p, r, NB_GPT_NANOGPT, true);
}
static nb_status i_nanogpt_nobias(any_module *m, nb_ctx *p, nb_pcg32 *r) {
    return i_gpt_any(m, p, r, NB_GPT_NANOGPT, false);
}
static nb_tensor *m_gpt(nb_ctx *c, any_module *m, nb_tensor *x) {
    return nb_gpt_forward(c, &m->gpt, x);
}

#define MOD(T) T##_params, T##_train
static const mod_case modules[] = {
    {"Linear", "(2,3,4) -> 3, bias", i_linear, m_linear, MOD(linear), {IN_UNIFORM, S3(2, 3, 4)}},
    {"Linear", "(3,4) -> 3, no bias", i_linear_nobias, m_linear, MOD(linear), {IN_UNIFORM, S2(3, 4)}},
    {"LayerNorm", "(2,3,5) affine", i_layer_norm, m_layer_norm, MOD(layer_norm), {IN_UNIFORM, S3(2, 3, 5)}},
    {"RMSNorm", "(2,3,5) affine, eps 1e-6", i_rms_norm, m_rms_norm, MOD(rms_norm), {IN_UNIFORM, S3(2, 3, 5)}},
    {"Embedding", "(6,3), ids (2,4)", i_embedding, m_embedding, MOD(embedding), {IN_CLASSES, S2(2, 4), 6}},
    {"SelfAttention_v1", "(6,3) -> 2", i_sa1, m_sa1, MOD(self_attention_v1), {IN_UNIFORM, S2(6, 3)}},
    {"SelfAttention_v2", "(6,3) -> 2, qkv_bias", i_sa2, m_sa2, MOD(self_attention_v2), {IN_UNIFORM, S2(6, 3)}},
    {"CausalAttention", "(2,6,3) eval", i_causal, m_causal, MOD(causal_attention), {IN_UNIFORM, S3(2, 6, 3)}},
    {"CausalAttention", "(2,6,3) train, p=0.5 fixed mask", i_causal, m_causal, MOD(causal_attention), {IN_UNIFORM, S3(2, 6, 3)}, true},
    {"MHAWrapper", "(2,4,3) 2 heads eval", i_wrapper, m_wrapper, MOD(mha_wrapper), {IN_UNIFORM, S3(2, 4, 3)}},
    {"MHAWrapper", "(2,4,3) 2 heads train, fixed mask", i_wrapper, m_wrapper, MOD(mha_wrapper), {IN_UNIFORM, S3(2, 4, 3)}, true},
    {"MultiHeadAttn", "(2,4,4) 2 heads eval", i_mha, m_mha, MOD(mha), {IN_UNIFORM, S3(2, 4, 4)}},
    {"MultiHeadAttn", "(2,4,4) 2 heads train, fixed mask", i_mha, m_mha, MOD(mha), {IN_UNIFORM, S3(2, 4, 4)}, true},
    {"MultiHeadAttn", "(2,4,4) key padding mask, eval", i_mha, m_mha_padded, MOD(mha), {IN_UNIFORM, S3(2, 4, 4)}},
    {"MultiHeadAttn", "(2,4,4) padded, train, fixed mask", i_mha, m_mha_padded, MOD(mha), {IN_UNIFORM, S3(2, 4, 4)}, true},
    {"MultiHeadAttn", "composed ops, train, fixed mask", i_mha, m_mha_composed, MOD(mha), {IN_UNIFORM, S3(2, 4, 4)}, true},
    {"GPTModel", "ids (2,3), qkv_bias, eval", i_gptmodel, m_gpt, MOD(gpt), {IN_CLASSES, S2(2, 3), 5}},
    {"GPTModel", "ids (2,4), train, p=0.3 fixed masks", i_gptmodel, m_gpt, MOD(gpt), {IN_CLASSES, S2(2, 4), 5}, true},
    {"nanoGPT", "ids (2,3), bias, tied head, eval", i_nanogpt, m_gpt, MOD(gpt), {IN_CLASSES, S2(2, 3), 5}},
    {"nanoGPT", "ids (2,4), no bias, train, fixed masks", i_nanogpt_nobias, m_gpt, MOD(gpt), {IN_CLASSES, S2(2, 4), 5}, true},
};

static nb_tensor *draw(nb_ctx *ctx, const in_spec *s, nb_pcg32 *rng);

/* Checks one module case; returns its gradcheck status. */
typedef nb_status (*check_fn)(nb_ctx *ctx, nb_gradcheck_fn f, void *user, const nb_tensor_list *params,
                              int n_in, nb_tensor *const *in, const nb_gradcheck_opts *opts,
                              nb_gradcheck_result *res);

/* One line: each check's worst error (reverse mode, second order, forward
 * mode: r1 comes from one nb_gradcheck with check_forward_ad, st1 its
 * status) and the verdict; the failing check's message below it. Returns
 * whether all three passed. */
static bool report(const char *op, const char *what, nb_status st1, const nb_gradcheck_result *r1,
                   bool ok2, const nb_gradcheck_result *r2, const char *err) {
    bool ran = !err && (st1 == NB_OK || st1 == NB_ERR_VALUE);
    bool ok1 = ran && r1->backward_passed, okf = ran && r1->forward_passed;
    printf("%-17s %-34s %-12.3g %-12.3g %-12.3g %s\n", op, what, ok1 ? r1->max_abs_err : NAN,
           ok2 ? r2->max_abs_err : NAN, okf ? r1->forward_max_abs_err : NAN,
           ok1 && ok2 && okf ? "PASS" : "FAIL");
    if (err) printf("    %s\n", err);
    else if (!ok1 || !okf) printf("    %s\n", r1->message);
    else if (!ok2) printf("    %s\n", r2->message);
    return ok1 && ok2 && okf;
}

static nb_status check_module(const mod_case *c, nb_pcg32 *rng, nb_ctx *ctx,
                              nb_gradcheck_result *r, check_fn check) {
    static mod_run run;
    static nb_pcg32 drop_rng;
    memset(&run, 0, sizeof run);
    run.c = c;
    run.rng = &drop_rng;
    /* the module draws its weights from drop_rng and keeps it for dropout */
    nb_pcg32_seed(&drop_rng, 5, 5);
    nb_status st = c->init(&run.m, ctx, &drop_rng);
    if (st) return st;
    c->train(&run.m, c->train_mode);
    nb_tensor *x = draw(ctx, &c->x, rng);
    if (x && x->dtype == NB_F64) nb_requires_grad(x); /* x too, beside every parameter */
    if (nb_ctx_error(ctx)) return nb_ctx_status(ctx);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.check_forward_ad = true;
    return check(ctx, f_module, &run, c->params(&run.m), 1, &x, &o, r);
}

static nb_tensor *draw(nb_ctx *ctx, const in_spec *s, nb_pcg32 *rng) {
    nb_dtype dt = s->kind == IN_CLASSES ? NB_I64 : s->kind == IN_MASK ? NB_BOOL : NB_F64;
    nb_tensor *t = nb_zeros(ctx, dt, s->ndim, s->shape);
    if (!t) return NULL;
    for (size_t i = 0; i < t->numel; i++) {
        double u = nb_pcg32_double(rng), v;
        switch (s->kind) {
        case IN_AWAY: v = (0.2 + 0.8 * u) * (nb_pcg32_bounded(rng, 2) ? 1 : -1); break;
        case IN_POSITIVE: v = 0.3 + 1.7 * u; break;
        case IN_CLASSES: v = (double)nb_pcg32_bounded(rng, (uint32_t)s->classes); break;
        case IN_MASK: v = u < 0.3; break;
        default: v = 2.0 * u - 1.0; break;
        }
        nb_set(t, i, v);
    }
    return t;
}

/* A row's input as the tool draws it: REAL uniform in [-1, 1]. */
static in_spec row_input(const nb_row_input *r) {
    in_spec s = {r->domain == NB_ROW_AWAY       ? IN_AWAY
                 : r->domain == NB_ROW_POSITIVE ? IN_POSITIVE
                                                : IN_UNIFORM,
                 r->ndim, {0}, 0};
    memcpy(s.shape, r->shape, sizeof s.shape);
    return s;
}

/* Gradcheck and gradgradcheck of one op case, reported on one line;
 * returns whether both passed. */
static bool check_op(const gc_case *c, nb_pcg32 *rng) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *in[4] = {0};
    for (int i = 0; i < c->n_in; i++) in[i] = draw(ctx, &c->in[i], rng);
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = c->fast;
    o.check_forward_ad = true;
    nb_gradcheck_result r1, r2;
    memset(&r1, 0, sizeof r1);
    const char *bad_in = nb_ctx_error(ctx);
    nb_ctx *c1 = nb_ctx_new(0), *c2 = nb_ctx_new(0); /* each check records on its own */
    nb_status st1 = bad_in ? NB_ERR_NULL : nb_gradcheck(c1, c->fn, NULL, c->n_in, in, &o, &r1);
    bool ok2 = !bad_in && nb_gradgradcheck(c2, c->fn, NULL, c->n_in, in, &o, &r2) == NB_OK;
    bool ok = report(c->op, c->what, st1, &r1, ok2, &r2, bad_in);
    nb_ctx_free(c1), nb_ctx_free(c2);
    nb_ctx_free(ctx);
    return ok;
}

/* A case this run leaves to another shard: its inputs are drawn all the
 * same and dropped, so every case sees the inputs of the whole run. */
static void skip_inputs(const in_spec *spec, int n, nb_pcg32 *rng) {
    nb_ctx *ctx = nb_ctx_new(0);
    for (int i = 0; i < n; i++) draw(ctx, &spec[i], rng);
    nb_ctx_free(ctx);
}

/* Which cases this run checks: those of one op or module (only), and of
 * those the ones whose index in the whole run is shard modulo shards. */
typedef struct selection {
    const char *only;
    int shard, shards, index;
} selection;

static bool selected(selection *s) {
    return s->index++ % s->shards == s->shard;
}

static void usage(FILE *f) {
    fputs("usage: nabla-gradcheck [--shard K/N] [OP]\n"
          "Checks every differentiable op and module (or only OP, e.g. matmul or\n"
          "MultiHeadAttn) in float64 against central finite differences, one line\n"
          "each (reverse mode, second order, forward mode), then \"N passed, M\n"
          "failed\". Writes no files.\n"
          "Exit status: 0 all passed, 1 a check failed, 2 bad usage.\n"
          "  --shard K/N  only the cases numbered K modulo N (0 <= K < N), with the\n"
          "               inputs of the whole run: N runs with K = 0 .. N-1 check\n"
          "               every case once (make memcheck-ops runs two at once)\n"
          "  --help  this text\n",
          f);
}

/* The arguments into sel; 0 to go on, else the exit status (help, bad usage). */
static int parse_args(int argc, char **argv, selection *sel) {
    *sel = (selection){NULL, 0, 1, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strcmp(argv[i], "--shard") && i + 1 < argc) {
            char end;
            if (sscanf(argv[++i], "%d/%d%c", &sel->shard, &sel->shards, &end) != 2 ||
                sel->shards < 1 || sel->shard < 0 || sel->shard >= sel->shards) {
                fprintf(stderr, "nabla-gradcheck: --shard wants K/N with 0 <= K < N, not '%s'\n",
                        argv[i]);
                return 2;
            }
            continue;
        }
        if (argv[i][0] == '-' || sel->only) {
            fprintf(stderr, "nabla-gradcheck: %s '%s'\n",
                    argv[i][0] == '-' ? "unknown option" : "more than one OP:", argv[i]);
            usage(stderr);
            return 2;
        }
        sel->only = argv[i];
    }
    return 0;
}

int main(int argc, char **argv) {
    selection sel;
    int usage_status = parse_args(argc, argv, &sel);
    if (usage_status) return usage_status < 0 ? 0 : usage_status;
    const char *only = sel.only;
    int missing = op_without_case();
    if (missing >= 0) {
        fprintf(stderr, "nabla-gradcheck: op %s has no case in the table\n",
                nb_op_name(missing));
        return 1;
    }
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 2024, 1);
    int passed = 0, failed = 0;
    printf("%-17s %-34s %-12s %-12s %-12s %s\n", "op", "case", "1st order", "2nd order",
           "forward AD", "result");
    /* the ops in the list's order: each op's row case, then its hand-written ones */
    for (int op = 0; op < NB_OP_CUSTOM; op++) {
        if (only && strcmp(only, nb_op_name(op)) != 0) continue;
        const nb_row_case *row = nb_row_case_of(op);
        if (row) {
            gc_case c = {row->name, NULL, row->fn, row->n_in, {{0}}, false};
            for (int i = 0; i < row->n_in; i++) c.in[i] = row_input(&row->in[i]);
            char shapes[48], what[64];
            snprintf(what, sizeof what, "%s op list", nb_row_shapes(row, shapes, sizeof shapes));
            c.what = what;
            if (!selected(&sel)) skip_inputs(c.in, c.n_in, &rng);
            else check_op(&c, &rng) ? passed++ : failed++;
        }
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            if (strcmp(cases[k].op, nb_op_name(op)) != 0) continue;
            if (!selected(&sel)) skip_inputs(cases[k].in, cases[k].n_in, &rng);
            else check_op(&cases[k], &rng) ? passed++ : failed++;
        }
    }
    for (size_t k = 0; k < sizeof modules / sizeof modules[0]; k++) {
        const mod_case *c = &modules[k];
        if (only && strcmp(only, c->name) != 0) continue;
        if (!selected(&sel)) {
            skip_inputs(&c->x, 1, &rng);
            continue;
        }
        nb_ctx *ctx = nb_ctx_new(0), *ctx2 = nb_ctx_new(0);
        nb_gradcheck_result r1, r2;
        memset(&r1, 0, sizeof r1), memset(&r2, 0, sizeof r2);
        nb_pcg32 rng2 = rng; /* the second check draws the same x */
        nb_status st1 = check_module(c, &rng, ctx, &r1, nb_gradcheck_params);
        bool ok2 = check_module(c, &rng2, ctx2, &r2, nb_gradgradcheck_params) == NB_OK;
        const char *e = st1 == NB_OK || st1 == NB_ERR_VALUE ? NULL : nb_ctx_error(ctx);
        if (!e && !ok2 && nb_ctx_error(ctx2) && !r2.message[0]) e = nb_ctx_error(ctx2);
        report(c->name, c->what, st1, &r1, ok2, &r2, e) ? passed++ : failed++;
        nb_ctx_free(ctx), nb_ctx_free(ctx2);
    }
    if (passed + failed == 0) {
        if (only) fprintf(stderr, "nabla-gradcheck: no op or module is called '%s'\n", only);
        else fprintf(stderr, "nabla-gradcheck: shard %d/%d has no case\n", sel.shard, sel.shards);
        return 2;
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
