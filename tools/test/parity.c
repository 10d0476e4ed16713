/* parity.c - replays the PyTorch fixtures of tests/fixtures/parity in nabla
 * and measures the difference (the measure and tolerances are in parity.h;
 * the file layout in tools/ref/gen_fixtures.py).
 *
 * A fixture names an op ("op"), a module class ("module") or an optimizer
 * ("optim", for a training trajectory) in its metadata, with the arguments.
 * The op and module tables below map those names to nabla calls; everything
 * else (loading, the backward, the comparisons) is shared. */
#include "parity.h"

#include "op_rows.h"

#include <dirent.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_META 32
#define MAX_IN 8
#define MAX_OUT 8

/* One fixture being replayed. */
typedef struct run {
    const char *file;   /* base name, for messages */
    nb_ctx *ctx;        /* the fixture's tensors, module parameters, the recorded forward */
    nb_tensor_list fix; /* the fixture's tensors, in file order */
    int n_meta;
    const char *keys[MAX_META], *values[MAX_META];
    nb_dtype dt;
    double scale[3];    /* the error's denominators: outputs, gradients, second-order
                           gradients (column_scales) */
    bool bad_arg;       /* a metadata argument was missing or malformed */
    nb_pcg32 rng;       /* module inits draw from it (values are then overwritten);
                           dropout keeps a pointer to it, so it lives as long as the run */
    nb_parity_result *r;
} run;

/* The outputs of one op or module call, under their fixture names. */
typedef struct outs {
    int n;
    const char *name[MAX_OUT];
    nb_tensor *t[MAX_OUT];
} outs;

static void put(outs *o, const char *name, nb_tensor *t) {
    if (o->n < MAX_OUT) {
        o->name[o->n] = name;
        o->t[o->n++] = t;
    }
}

/* Marks the case failed; the first message (prefixed by the file) is kept. */
static bool fail(run *R, const char *fmt, ...) NB_PRINTF_LIKE(2, 3);
static bool fail(run *R, const char *fmt, ...) {
    nb_parity_result *r = R->r;
    r->passed = false;
    if (!r->message[0]) {
        int k = snprintf(r->message, sizeof r->message, "%s: ", R->file);
        va_list ap;
        va_start(ap, fmt);
        if (k > 0 && (size_t)k < sizeof r->message)
            vsnprintf(r->message + k, sizeof r->message - (size_t)k, fmt, ap);
        va_end(ap);
    }
    return false;
}

static bool starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* ---- metadata arguments ------------------------------------------------------- */

static const char *meta(const run *R, const char *key) {
    for (int i = 0; i < R->n_meta; i++)
        if (strcmp(R->keys[i], key) == 0) return R->values[i];
    return NULL;
}

static void bad_arg(run *R, const char *key, const char *v) {
    R->bad_arg = true;
    if (v)
        fail(R, "metadata '%s' = '%s' is malformed", key, v);
    else
        fail(R, "metadata '%s' is missing", key);
}

/* A float (repr() text, "inf"/"-inf" included); NaN and a failure if absent. */
static double arg_f(run *R, const char *key) {
    const char *v = meta(R, key);
    char *end;
    double d = v ? strtod(v, &end) : 0;
    if (!v || end == v || *end) {
        bad_arg(R, key, v);
        return NAN;
    }
    return d;
}

static int64_t arg_i(run *R, const char *key) {
    const char *v = meta(R, key);
    char *end;
    long long n = v ? strtoll(v, &end, 10) : 0;
    if (!v || end == v || *end) {
        bad_arg(R, key, v);
        return 0;
    }
    return (int64_t)n;
}

/* "0" or "1"; dflt when the key is absent and dflt_ok. */
static bool arg_b_or(run *R, const char *key, bool dflt_ok, bool dflt) {
    const char *v = meta(R, key);
    if (!v && dflt_ok) return dflt;
    if (v && (strcmp(v, "0") == 0 || strcmp(v, "1") == 0)) return v[0] == '1';
    bad_arg(R, key, v);
    return false;
}

static bool arg_b(run *R, const char *key) {
    return arg_b_or(R, key, false, false);
}

/* A comma-separated list of at most max integers; returns how many. */
static int arg_ints(run *R, const char *key, int64_t *v, int max) {
    const char *s = meta(R, key);
    int n = 0;
    for (const char *p = s; p && *p && n < max; n++) {
        char *end;
        v[n] = (int64_t)strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',')) break;
        p = *end ? end + 1 : end;
        if (!*end) return n + 1;
    }
    bad_arg(R, key, s);
    return 0;
}

static nb_gelu_approx arg_gelu(run *R) {
    const char *v = meta(R, "approximate");
    if (v && strcmp(v, "none") == 0) return NB_GELU_NONE;
    if (v && strcmp(v, "tanh") == 0) return NB_GELU_TANH;
    bad_arg(R, "approximate", v);
    return NB_GELU_NONE;
}

/* ---- ops ------------------------------------------------------------------------ */
/* An op with an NB_OP row in the op list is replayed through the row's call
 * (op_rows.h) and needs nothing here. An NB_OP_HAND op has its op_<name>
 * below: each reads its arguments from the metadata and puts nabla's
 * outputs. A false return (or an error on R->ctx) fails the case. */

typedef bool (*op_fn)(run *R, nb_tensor *const *in, int n_in, outs *o);

/* One float argument `key`, read before the call. */
#define OP_UNARY_ARG(name, key)                                                \
    static bool op_##name(run *R, nb_tensor *const *in, int n_in, outs *o) {   \
        (void)n_in;                                                            \
        double v = arg_f(R, key);                                              \
        if (R->bad_arg) return false;                                          \
        put(o, "out", nb_##name(R->ctx, in[0], v));                            \
        return true;                                                           \
    }

OP_UNARY_ARG(pow, "p")
OP_UNARY_ARG(causal_fill, "value")

static bool op_gelu(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    nb_gelu_approx a = arg_gelu(R);
    if (R->bad_arg) return false;
    put(o, "out", nb_gelu(R->ctx, in[0], a));
    return true;
}

/* sum_dim, mean_dim and max_dim share the (dim, keepdim) arguments. */
static bool op_sum_dim(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int dim = (int)arg_i(R, "dim");
    bool keep = arg_b(R, "keepdim");
    if (R->bad_arg) return false;
    put(o, "out", nb_sum_dim(R->ctx, in[0], dim, keep));
    return true;
}

static bool op_mean_dim(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int dim = (int)arg_i(R, "dim");
    bool keep = arg_b(R, "keepdim");
    if (R->bad_arg) return false;
    put(o, "out", nb_mean_dim(R->ctx, in[0], dim, keep));
    return true;
}

/* values and arg-max indices, like PyTorch's x.max(dim, keepdim) */
static bool op_max_dim(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int dim = (int)arg_i(R, "dim");
    bool keep = arg_b(R, "keepdim");
    if (R->bad_arg) return false;
    nb_tensor *idx = NULL;
    put(o, "out", nb_max_dim(R->ctx, in[0], dim, keep, &idx));
    put(o, "out.indices", idx);
    return true;
}

/* values and indices, like torch.topk(x, k, dim) */
static bool op_topk(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int k = (int)arg_i(R, "k"), dim = (int)arg_i(R, "dim");
    if (R->bad_arg) return false;
    nb_tensor *idx = NULL;
    put(o, "out", nb_topk(R->ctx, in[0], k, dim, &idx));
    put(o, "out.indices", idx);
    return true;
}

/* x, idx */
static bool op_index_select(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    put(o, "out", nb_index_select(R->ctx, in[0], in[1]));
    return true;
}

/* base, idx, src */
static bool op_index_add(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    put(o, "out", nb_index_add(R->ctx, in[0], in[1], in[2]));
    return true;
}

static bool op_transpose(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int d0 = (int)arg_i(R, "dim0"), d1 = (int)arg_i(R, "dim1");
    if (R->bad_arg) return false;
    put(o, "out", nb_transpose(R->ctx, in[0], d0, d1));
    return true;
}

static bool op_permute(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int64_t p[NB_MAX_DIMS];
    int n = arg_ints(R, "perm", p, NB_MAX_DIMS);
    if (R->bad_arg) return false;
    if (n != in[0]->ndim) return fail(R, "metadata 'perm' has %d entries for %d dims", n,
                                      in[0]->ndim);
    int perm[NB_MAX_DIMS];
    for (int i = 0; i < n; i++) perm[i] = (int)p[i];
    put(o, "out", nb_permute(R->ctx, in[0], perm));
    return true;
}

static bool op_reshape(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int64_t shape[NB_MAX_DIMS];
    int n = arg_ints(R, "shape", shape, NB_MAX_DIMS);
    if (R->bad_arg) return false;
    put(o, "out", nb_reshape(R->ctx, in[0], n, shape));
    return true;
}

static bool op_concat(run *R, nb_tensor *const *in, int n_in, outs *o) {
    int dim = (int)arg_i(R, "dim");
    if (R->bad_arg) return false;
    put(o, "out", nb_concat(R->ctx, n_in, in, dim));
    return true;
}

/* x then one weight a group, the groups' sizes in "rows" */
static bool op_grouped_linear(run *R, nb_tensor *const *in, int n_in, outs *o) {
    int64_t rows[MAX_IN];
    int n = arg_ints(R, "rows", rows, MAX_IN);
    if (R->bad_arg) return false;
    if (n != n_in - 1) return fail(R, "grouped_linear: %d row counts for %d weights", n, n_in - 1);
    put(o, "out", nb_grouped_linear(R->ctx, in[0], n, in + 1, rows));
    return true;
}

/* the pieces are "out.0", "out.1", ..., as torch.split's tuple */
static bool op_split(run *R, nb_tensor *const *in, int n_in, outs *o) {
    static const char *const names[MAX_OUT] = {"out.0", "out.1", "out.2", "out.3",
                                               "out.4", "out.5", "out.6", "out.7"};
    (void)n_in;
    int64_t sizes[MAX_OUT];
    int dim = (int)arg_i(R, "dim");
    int n = arg_ints(R, "sizes", sizes, MAX_OUT);
    if (R->bad_arg) return false;
    nb_tensor *pieces[MAX_OUT] = {0};
    if (nb_split(R->ctx, in[0], dim, n, sizes, pieces)) return true; /* error is on ctx */
    for (int i = 0; i < n; i++) put(o, names[i], pieces[i]);
    return true;
}

static bool op_masked_fill(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    double v = arg_f(R, "value");
    if (R->bad_arg) return false;
    put(o, "out", nb_masked_fill(R->ctx, in[0], in[1], v));
    return true;
}

/* softmax(causal_fill(x, value)): the attention pattern with -inf */
static bool op_causal_fill_softmax(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    double v = arg_f(R, "value");
    if (R->bad_arg) return false;
    put(o, "out", nb_softmax(R->ctx, nb_causal_fill(R->ctx, in[0], v)));
    return true;
}

static bool op_cross_entropy(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    put(o, "out", nb_cross_entropy(R->ctx, in[0], in[1]));
    return true;
}

/* x, w[, b] */
static bool op_linear(run *R, nb_tensor *const *in, int n_in, outs *o) {
    put(o, "out", nb_linear(R->ctx, in[0], in[1], n_in > 2 ? in[2] : NULL));
    return true;
}

static bool op_dropout(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    double p = arg_f(R, "p");
    bool train = arg_b(R, "train");
    if (R->bad_arg) return false;
    put(o, "out", nb_dropout(R->ctx, in[0], p, train, &R->rng));
    return true;
}

/* weight (num, dim), ids */
static bool op_embedding(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    put(o, "out", nb_embedding(R->ctx, in[0], in[1]));
    return true;
}

/* x[, w, b] */
static bool op_layer_norm(run *R, nb_tensor *const *in, int n_in, outs *o) {
    double eps = arg_f(R, "eps");
    if (R->bad_arg) return false;
    put(o, "out", nb_layer_norm(R->ctx, in[0], n_in > 1 ? in[1] : NULL,
                                n_in > 2 ? in[2] : NULL, eps));
    return true;
}

/* x[, w] */
static bool op_rms_norm(run *R, nb_tensor *const *in, int n_in, outs *o) {
    double eps = arg_f(R, "eps");
    if (R->bad_arg) return false;
    put(o, "out", nb_rms_norm(R->ctx, in[0], n_in > 1 ? in[1] : NULL, eps));
    return true;
}

/* q, k, v[, key_padding_mask]; dropout 0 (PyTorch's mask cannot be replayed);
 * with a "window", through nb_sdpa_ex */
static bool op_sdpa(run *R, nb_tensor *const *in, int n_in, outs *o) {
    bool causal = arg_b(R, "causal");
    double scale = arg_f(R, "scale");
    int64_t window = meta(R, "window") ? arg_i(R, "window") : 0;
    if (R->bad_arg) return false;
    const nb_tensor *pad = n_in > 3 ? in[3] : NULL;
    if (window)
        put(o, "out", nb_sdpa_ex(R->ctx, in[0], in[1], in[2],
                                 &(nb_sdpa_opts){.key_padding_mask = pad, .causal = causal,
                                                 .scale = scale, .window = window}));
    else
        put(o, "out", nb_sdpa(R->ctx, in[0], in[1], in[2], pad, causal, scale, 0.0, 0));
    return true;
}

/* x, cos, sin: the tables are constants, which rope refuses to see
 * requiring grad (the loader marks every float input) */
static bool op_rope(run *R, nb_tensor *const *in, int n_in, outs *o) {
    (void)n_in;
    int64_t pos0 = arg_i(R, "pos0");
    unsigned flags = (arg_b(R, "interleaved") ? NB_ROPE_INTERLEAVED : 0u) |
                     (arg_b(R, "thd") ? NB_ROPE_THD : 0u);
    if (R->bad_arg) return false;
    in[1]->requires_grad = in[2]->requires_grad = false;
    put(o, "out", nb_rope(R->ctx, in[0], in[1], in[2], pos0, flags));
    return true;
}

/* Fixture op name, input count, the call: one row per op of the list
 * (nabla/ops.def), an NB_OP row through its row case, an NB_OP_HAND row
 * through its op_<name> above (an op without one stops the build, naming
 * it), then the composite causal_fill_softmax. */
typedef struct op_row {
    const char *name;
    int n_in; /* -1: 1 to MAX_IN */
    op_fn fn;
    nb_gradcheck_fn row_fn; /* the row's call, when fn is NULL */
} op_row;

static const op_row OPS[] = {
#define NB_OP(id, name, n_in, formula, ...) {#name, n_in, NULL, nb_row_##name},
#define NB_OP_HAND(id, name, n_in, formula, tangent) {#name, n_in, op_##name, NULL},
#include "nabla/ops.def"
#undef NB_OP
#undef NB_OP_HAND
    {"causal_fill_softmax", 1, op_causal_fill_softmax, NULL},
};

/* Runs op on the fixture's inputs, putting its outputs. */
static bool op_call(run *R, const op_row *op, nb_tensor *const *in, int n_in, outs *o) {
    if (op->fn) return op->fn(R, in, n_in, o);
    put(o, "out", op->row_fn(R->ctx, in, NULL));
    return true;
}

/* Where a fixture's inputs differ from the op's differentiable inputs (the
 * list's count): optional ones (linear's bias, layer_norm's weight and
 * bias, rms_norm's weight) and ones that take no gradient (cross_entropy's targets,
 * embedding's, index_select's and index_add's ids, masked_fill's and sdpa's
 * masks, rope's tables). */
static const struct {
    const char *name;
    int min_in, max_in;
} OTHER_INPUTS[] = {{"linear", 2, 3},        {"layer_norm", 1, 3},    {"rms_norm", 1, 2},
                    {"sdpa", 3, 4},          {"cross_entropy", 2, 2}, {"embedding", 2, 2},
                    {"masked_fill", 2, 2},   {"rope", 3, 3},          {"index_select", 2, 2},
                    {"index_add", 3, 3},     {"grouped_linear", 2, MAX_IN}};

/* The input counts op accepts. */
static void op_inputs(const op_row *op, int *min_in, int *max_in) {
    *min_in = op->n_in < 0 ? 1 : op->n_in;
    *max_in = op->n_in < 0 ? MAX_IN : op->n_in;
    for (size_t i = 0; i < sizeof OTHER_INPUTS / sizeof OTHER_INPUTS[0]; i++)
        if (strcmp(OTHER_INPUTS[i].name, op->name) == 0) {
            *min_in = OTHER_INPUTS[i].min_in;
            *max_in = OTHER_INPUTS[i].max_in;
        }
}

/* ---- modules ------------------------------------------------------------------------ */

/* Copies the fixture's "<prefix><name>" tensors into the module's parameters
 * of the same names; the two sets of names must be equal. */
static bool load_params(run *R, const nb_tensor_list *params, const char *prefix) {
    nb_tensor_list src = {0};
    size_t k = strlen(prefix);
    for (int i = 0; i < R->fix.n; i++) {
        const char *name = nb_list_name(&R->fix, i);
        if (!starts_with(name, prefix)) continue;
        if (!nb_list_get(params, name + k))
            return fail(R, "PyTorch's parameter '%s' has no counterpart in nabla's module",
                        name + k);
        nb_list_add(&src, name + k, nb_list_tensor(&R->fix, i));
    }
    return nb_params_copy_from(params, &src) == NB_OK; /* the error is on R->ctx */
}

/* A module: created in R->ctx with the metadata's constructor arguments,
 * given the fixture's parameters and training mode, run on in[]. *params
 * receives its parameter list. */
typedef bool (*mod_fn)(run *R, nb_tensor *const *in, int n_in, outs *o,
                       const nb_tensor_list **params);

/* Allocates the module struct; NULL after a bad argument. */
static void *mod_alloc(run *R, size_t size) {
    return R->bad_arg ? NULL : nb_ctx_alloc(R->ctx, size);
}

/* After init (status st): loads the parameters; then `train` may run. */
static bool mod_ready(run *R, nb_status st, const nb_tensor_list *params,
                      const nb_tensor_list **out) {
    if (st || !load_params(R, params, "param.")) return false;
    *out = params;
    return true;
}

static bool training(run *R) {
    return arg_b_or(R, "training", true, true);
}

static bool mod_linear(run *R, nb_tensor *const *in, int n_in, outs *o,
                       const nb_tensor_list **params) {
    (void)n_in;
    int64_t fin = arg_i(R, "in_features"), fout = arg_i(R, "out_features");
    bool bias = arg_b(R, "bias"), train = training(R);
    nb_nn_linear *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_linear_init(R->ctx, m, fin, fout, bias, R->dt, &R->rng),
                         &m->params, params))
        return false;
    nb_nn_linear_train(m, train);
    put(o, "out", nb_nn_linear_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_layer_norm(run *R, nb_tensor *const *in, int n_in, outs *o,
                           const nb_tensor_list **params) {
    (void)n_in;
    int64_t dim = arg_i(R, "dim");
    double eps = arg_f(R, "eps");
    bool affine = arg_b(R, "elementwise_affine"), train = training(R);
    nb_nn_layer_norm *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_layer_norm_init(R->ctx, m, dim, eps, affine, R->dt),
                         &m->params, params))
        return false;
    nb_nn_layer_norm_train(m, train);
    put(o, "out", nb_nn_layer_norm_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_rms_norm(run *R, nb_tensor *const *in, int n_in, outs *o,
                         const nb_tensor_list **params) {
    (void)n_in;
    int64_t dim = arg_i(R, "dim");
    double eps = arg_f(R, "eps");
    bool affine = arg_b(R, "elementwise_affine"), train = training(R);
    nb_nn_rms_norm *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_rms_norm_init(R->ctx, m, dim, eps, affine, R->dt),
                         &m->params, params))
        return false;
    nb_nn_rms_norm_train(m, train);
    put(o, "out", nb_nn_rms_norm_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_embedding(run *R, nb_tensor *const *in, int n_in, outs *o,
                          const nb_tensor_list **params) {
    (void)n_in;
    int64_t num = arg_i(R, "num_embeddings"), dim = arg_i(R, "embedding_dim");
    bool train = training(R);
    nb_nn_embedding *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_embedding_init(R->ctx, m, num, dim, R->dt, &R->rng),
                         &m->params, params))
        return false;
    nb_nn_embedding_train(m, train);
    put(o, "out", nb_nn_embedding_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_gelu(run *R, nb_tensor *const *in, int n_in, outs *o,
                     const nb_tensor_list **params) {
    (void)n_in;
    nb_gelu_approx a = arg_gelu(R);
    bool train = training(R);
    nb_nn_gelu *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_gelu_init(R->ctx, m, a), &m->params, params)) return false;
    nb_nn_gelu_train(m, train);
    put(o, "out", nb_nn_gelu_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_dropout(run *R, nb_tensor *const *in, int n_in, outs *o,
                        const nb_tensor_list **params) {
    (void)n_in;
    double p = arg_f(R, "p");
    bool train = training(R);
    nb_nn_dropout *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_dropout_init(R->ctx, m, p, &R->rng), &m->params, params))
        return false;
    nb_nn_dropout_train(m, train);
    put(o, "out", nb_nn_dropout_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_sa_v1(run *R, nb_tensor *const *in, int n_in, outs *o,
                      const nb_tensor_list **params) {
    (void)n_in;
    int64_t d_in = arg_i(R, "d_in"), d_out = arg_i(R, "d_out");
    bool train = training(R);
    nb_nn_self_attention_v1 *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_self_attention_v1_init(R->ctx, m, d_in, d_out, R->dt, &R->rng),
                         &m->params, params))
        return false;
    nb_nn_self_attention_v1_train(m, train);
    put(o, "out", nb_nn_self_attention_v1_forward(R->ctx, m, in[0]));
    return true;
}

static bool mod_sa_v2(run *R, nb_tensor *const *in, int n_in, outs *o,
                      const nb_tensor_list **params) {
    (void)n_in;
    int64_t d_in = arg_i(R, "d_in"), d_out = arg_i(R, "d_out");
    bool bias = arg_b(R, "qkv_bias"), train = training(R);
    nb_nn_self_attention_v2 *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_self_attention_v2_init(R->ctx, m, d_in, d_out, bias, R->dt,
                                                         &R->rng),
                         &m->params, params))
        return false;
    nb_nn_self_attention_v2_train(m, train);
    put(o, "out", nb_nn_self_attention_v2_forward(R->ctx, m, in[0]));
    return true;
}

/* x[, key_padding_mask]; with the mask, also the attention weights */
static bool mod_causal(run *R, nb_tensor *const *in, int n_in, outs *o,
                       const nb_tensor_list **params) {
    int64_t d_in = arg_i(R, "d_in"), d_out = arg_i(R, "d_out");
    int64_t len = arg_i(R, "context_length");
    double p = arg_f(R, "dropout");
    bool bias = arg_b(R, "qkv_bias"), train = training(R);
    nb_nn_causal_attention *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_causal_attention_init(R->ctx, m, d_in, d_out, len, p, bias,
                                                        R->dt, &R->rng),
                         &m->params, params))
        return false;
    nb_nn_causal_attention_train(m, train);
    if (n_in > 1) {
        nb_tensor *w = NULL;
        put(o, "out", nb_nn_causal_attention_forward_masked(R->ctx, m, in[0], in[1], &w));
        put(o, "out.attn_weights", w);
    } else {
        put(o, "out", nb_nn_causal_attention_forward(R->ctx, m, in[0]));
    }
    return true;
}

static bool mod_wrapper(run *R, nb_tensor *const *in, int n_in, outs *o,
                        const nb_tensor_list **params) {
    (void)n_in;
    int64_t d_in = arg_i(R, "d_in"), d_out = arg_i(R, "d_out");
    int64_t len = arg_i(R, "context_length"), heads = arg_i(R, "num_heads");
    double p = arg_f(R, "dropout");
    bool bias = arg_b(R, "qkv_bias"), train = training(R);
    nb_nn_mha_wrapper *m = mod_alloc(R, sizeof *m);
    if (!m || !mod_ready(R, nb_nn_mha_wrapper_init(R->ctx, m, d_in, d_out, len, p, (int)heads,
                                                   bias, R->dt, &R->rng),
                         &m->params, params))
        return false;
    nb_nn_mha_wrapper_train(m, train);
    put(o, "out", nb_nn_mha_wrapper_forward(R->ctx, m, in[0]));
    return true;
}

/* The MultiHeadAttention of the metadata's arguments, in dt, parameters
 * loaded from "<prefix><name>" (shared with the trajectories). */
static nb_nn_mha *make_mha(run *R, const char *prefix) {
    int64_t d_in = arg_i(R, "d_in"), d_out = arg_i(R, "d_out");
    int64_t len = arg_i(R, "context_length"), heads = arg_i(R, "num_heads");
    double p = arg_f(R, "dropout");
    bool bias = arg_b(R, "qkv_bias");
    nb_nn_mha *m = mod_alloc(R, sizeof *m);
    if (!m || nb_nn_mha_init(R->ctx, m, d_in, d_out, len, p, (int)heads, bias, R->dt, &R->rng) ||
        !load_params(R, &m->params, prefix))
        return NULL;
    return m;
}

/* x[, key_padding_mask]; with the mask, also the attention weights */
static bool mod_mha(run *R, nb_tensor *const *in, int n_in, outs *o,
                    const nb_tensor_list **params) {
    bool train = training(R);
    nb_nn_mha *m = make_mha(R, "param.");
    if (!m) return false;
    nb_nn_mha_train(m, train);
    *params = &m->params;
    if (n_in > 1) {
        nb_tensor *w = NULL;
        put(o, "out", nb_nn_mha_forward_masked(R->ctx, m, in[0], in[1], &w));
        put(o, "out.attn_weights", w);
    } else {
        put(o, "out", nb_nn_mha_forward(R->ctx, m, in[0]));
    }
    return true;
}

/* PyTorch class name, accepted input counts, the call. */
static const struct {
    const char *name;
    int min_in, max_in;
    mod_fn fn;
} MODULES[] = {
    {"Linear", 1, 1, mod_linear},
    {"LayerNorm", 1, 1, mod_layer_norm},
    {"RMSNorm", 1, 1, mod_rms_norm},
    {"Embedding", 1, 1, mod_embedding},
    {"GELU", 1, 1, mod_gelu},
    {"Dropout", 1, 1, mod_dropout},
    {"SelfAttention_v1", 1, 1, mod_sa_v1},
    {"SelfAttention_v2", 1, 1, mod_sa_v2},
    {"CausalAttention", 1, 2, mod_causal},
    {"MultiHeadAttentionWrapper", 1, 1, mod_wrapper},
    {"MultiHeadAttention", 1, 2, mod_mha},
};

/* ---- comparison ------------------------------------------------------------------ */

/* "(1, 0, 2)": the multi-index of flat index i in t's shape. */
static char *index_str(const nb_tensor *t, size_t i, char *buf, size_t n) {
    size_t idx[NB_MAX_DIMS] = {0};
    for (int d = t->ndim - 1; d >= 0; d--) {
        idx[d] = i % (size_t)t->shape[d];
        i /= (size_t)t->shape[d];
    }
    size_t k = (size_t)snprintf(buf, n, "(");
    for (int d = 0; d < t->ndim && k < n; d++)
        k += (size_t)snprintf(buf + k, n - k, d ? ", %zu" : "%zu", idx[d]);
    if (k < n) snprintf(buf + k, n - k, ")");
    return buf;
}

/* Which column a fixture tensor is compared in: 0 the outputs (trajectories:
 * the losses), 1 the gradients (trajectories: the final parameters), -1
 * neither (inputs, parameters, cotangents). */
static int column_of(const char *name) {
    if (starts_with(name, "out") || strcmp(name, "losses") == 0) return 0;
    if (starts_with(name, "grad.") || starts_with(name, "final.param.")) return 1;
    if (starts_with(name, "grad2.")) return 2;
    return -1;
}

/* The denominators of the error measure: the largest finite |value| among
 * the floating reference tensors of each column (1 when that is 0). */
static void column_scales(run *R) {
    for (int c = 0; c < 3; c++) R->scale[c] = 0;
    for (int i = 0; i < R->fix.n; i++) {
        const nb_tensor *t = nb_list_tensor(&R->fix, i);
        int c = column_of(nb_list_name(&R->fix, i));
        if (c < 0 || (t->dtype != NB_F32 && t->dtype != NB_F64)) continue;
        for (size_t k = 0; k < t->numel; k++) {
            double v = fabs(nb_get(t, k));
            if (isfinite(v) && v > R->scale[c]) R->scale[c] = v;
        }
    }
    for (int c = 0; c < 3; c++)
        if (R->scale[c] == 0) R->scale[c] = 1;
}

/* The error (parity.h) of `got` (its values, or its gradient when
 * use_grad) against the fixture tensor `name`; kept in its column's maximum,
 * and failing the case with the worst element when above the tolerance. */
static void compare(run *R, const char *name, const nb_tensor *got, bool use_grad,
                    const nb_tensor *want) {
    nb_parity_result *r = R->r;
    int col = column_of(name);
    double scale = want->dtype == NB_I64 ? 1 : R->scale[col];
    char s1[64], s2[64];
    double err = 0;
    size_t worst = 0;
    if (!got) {
        err = INFINITY;
        fail(R, "%s: nabla has no such tensor", name);
    } else if (!nb_same_shape(got, want) || got->dtype != want->dtype) {
        err = INFINITY;
        fail(R, "%s: nabla's is %s %s, PyTorch's %s %s", name, nb_dtype_name(got->dtype),
             nb_shape_str(got, s1, sizeof s1), nb_dtype_name(want->dtype),
             nb_shape_str(want, s2, sizeof s2));
    } else {
        for (size_t i = 0; i < want->numel; i++) {
            double g = use_grad ? nb_grad_get(got, i) : nb_get(got, i), w = nb_get(want, i), e;
            if (!isfinite(w))
                e = (g == w || (isnan(g) && isnan(w))) ? 0 : INFINITY;
            else if (want->dtype == NB_I64)
                e = g == w ? 0 : INFINITY;
            else
                e = isfinite(g) ? fabs(g - w) / scale : INFINITY;
            if (e > err) {
                err = e;
                worst = i;
            }
        }
        if (!(err <= r->tol))
            fail(R, "%s element %s: got %.17g, want %.17g; error %.3g (relative to %.6g, the "
                 "largest |want| among the %s) exceeds %g", name,
                 index_str(want, worst, s1, sizeof s1),
                 use_grad ? nb_grad_get(got, worst) : nb_get(got, worst), nb_get(want, worst),
                 err, scale, col == 2 ? "second-order gradients" : col ? "gradients" : "outputs",
                 r->tol);
    }
    double *col_err = col ? &r->err_grad : &r->err_out;
    char *where = col ? r->worst_grad : r->worst_out;
    size_t where_n = col ? sizeof r->worst_grad : sizeof r->worst_out;
    if (col)
        r->n_grad++;
    else
        r->n_out++;
    if (err > *col_err || !where[0]) {
        *col_err = err;
        snprintf(where, where_n, "%s", name);
    }
}

/* Backward of L = sum over the outputs with a cotangent "grad_<name>" of
 * sum(out * grad_out). With one such output that is nb_backward with
 * grad_out itself; with several (split) the sum is built from nabla ops,
 * whose backward hands each output exactly its cotangent. */
static bool backward(run *R, const outs *o) {
    char gname[64];
    nb_tensor *root = NULL, *root_g = NULL, *loss = NULL;
    int n = 0;
    for (int k = 0; k < o->n; k++) {
        snprintf(gname, sizeof gname, "grad_%s", o->name[k]);
        nb_tensor *g = nb_list_get(&R->fix, gname);
        if (g) {
            n++;
            root = o->t[k];
            root_g = g;
        }
    }
    if (n == 0) return fail(R, "no grad_out in the fixture");
    if (n > 1) {
        for (int k = 0; k < o->n; k++) {
            snprintf(gname, sizeof gname, "grad_%s", o->name[k]);
            nb_tensor *g = nb_list_get(&R->fix, gname);
            if (!g) continue;
            nb_tensor *term = nb_sum(R->ctx, nb_mul(R->ctx, o->t[k], g));
            loss = loss ? nb_add(R->ctx, loss, term) : term;
        }
        root = loss;
        root_g = NULL;
    }
    if (nb_backward(R->ctx, root, root_g))
        return fail(R, "nabla: %s", nb_ctx_error(R->ctx));
    return true;
}

/* ---- cases --------------------------------------------------------------------------- */

/* The second-order gradient named "<k>" or "param.<name>" (a fixture
 * tensor "grad2.<...>"), or NULL. */
static nb_tensor *grad2_of(run *R, const char *what, nb_tensor *const *in, int n_in,
                           const nb_tensor_list *params, nb_tensor *const *g2) {
    (void)R;
    if (starts_with(what, "param.")) {
        for (int k = 0; params && k < params->n; k++)
            if (!strcmp(nb_list_name(params, k), what + 6)) return g2[n_in + k];
        return NULL;
    }
    char *end;
    long k = strtol(what, &end, 10);
    (void)in;
    return !*end && k >= 0 && k < n_in ? g2[k] : NULL;
}

/* Second order (f64 fixtures carry "grad2.<k>" and "grad2.param.<name>"):
 * g = the gradients of L = sum_k sum(out_k * grad_out_k) with respect to the
 * leaves (float inputs, then parameters), taken with nb_grad's create_graph;
 * s = sum_j sum(g_j * g_j); g2[j] = ds / d leaf j (zeros where s does not
 * depend on it). g2 holds n_in + n_par entries, NULL for inputs that are not
 * leaves. */
static bool second_order(run *R, const outs *o, nb_tensor *const *in, int n_in,
                         const nb_tensor_list *params, nb_tensor **g2) {
    nb_ctx *c = R->ctx;
    int n_par = params ? params->n : 0, m = 0, at[MAX_IN + NB_LIST_MAX];
    nb_tensor *leaf[MAX_IN + NB_LIST_MAX], *g1[MAX_IN + NB_LIST_MAX], *d2[MAX_IN + NB_LIST_MAX];
    for (int k = 0; k < n_in + n_par; k++) {
        nb_tensor *t = k < n_in ? in[k] : nb_list_tensor(params, k - n_in);
        g2[k] = NULL;
        if (t->requires_grad) at[m] = k, leaf[m++] = t;
    }
    nb_tensor *L = NULL;
    char gname[64];
    for (int k = 0; k < o->n; k++) {
        snprintf(gname, sizeof gname, "grad_%s", o->name[k]);
        nb_tensor *g = nb_list_get(&R->fix, gname);
        nb_tensor *term = g ? nb_sum(c, nb_mul(c, o->t[k], g)) : NULL;
        if (term) L = L ? nb_add(c, L, term) : term;
    }
    nb_grad_opts cg = {.create_graph = true, .allow_unused = true}, un = {.allow_unused = true};
    if (!L || nb_grad(c, 1, &L, NULL, m, leaf, &cg, g1))
        return fail(R, "nabla, first gradients with create_graph: %s", nb_ctx_error(c));
    nb_tensor *s = NULL;
    for (int j = 0; j < m; j++)
        if (g1[j] && g1[j]->requires_grad) {
            nb_tensor *term = nb_sum(c, nb_mul(c, g1[j], g1[j]));
            s = s ? nb_add(c, s, term) : term;
        }
    if (s && nb_grad(c, 1, &s, NULL, m, leaf, &un, d2))
        return fail(R, "nabla, second gradients: %s", nb_ctx_error(c));
    for (int j = 0; j < m; j++) {
        nb_tensor *t = leaf[j];
        g2[at[j]] = s && d2[j] ? d2[j] : nb_zeros(c, t->dtype, t->ndim, t->shape);
    }
    return true;
}

/* Compares every reference tensor of the fixture with nabla's (outputs
 * "out*", input gradients "grad.<k>", parameter gradients
 * "grad.param.<name>"), and fails the case for anything nabla made that has
 * no reference. */
static void compare_all(run *R, const outs *o, nb_tensor *const *in, int n_in,
                        const nb_tensor_list *params) {
    char name[64];
    nb_tensor *g2[MAX_IN + NB_LIST_MAX] = {0};
    bool order2 = false; /* f64 fixtures carry second-order references */
    for (int i = 0; i < R->fix.n; i++) order2 = order2 || starts_with(nb_list_name(&R->fix, i), "grad2.");
    if (order2) second_order(R, o, in, n_in, params, g2);
    for (int i = 0; i < R->fix.n; i++) {
        const char *fname = nb_list_name(&R->fix, i);
        const nb_tensor *want = nb_list_tensor(&R->fix, i);
        if (starts_with(fname, "out")) {
            const nb_tensor *got = NULL;
            for (int k = 0; k < o->n; k++)
                if (strcmp(o->name[k], fname) == 0) got = o->t[k];
            compare(R, fname, got, false, want);
        } else if (starts_with(fname, "grad2.")) {
            compare(R, fname, grad2_of(R, fname + 6, in, n_in, params, g2), false, want);
        } else if (starts_with(fname, "grad.param.")) {
            compare(R, fname, params ? nb_list_get(params, fname + 11) : NULL, true, want);
        } else if (starts_with(fname, "grad.")) {
            char *end;
            long k = strtol(fname + 5, &end, 10);
            compare(R, fname, (!*end && k >= 0 && k < n_in) ? in[k] : NULL, true, want);
        }
    }
    for (int k = 0; k < o->n; k++)
        if (!nb_list_get(&R->fix, o->name[k]))
            fail(R, "nabla's output '%s' has no PyTorch reference", o->name[k]);
    for (int k = 0; k < n_in; k++) {
        snprintf(name, sizeof name, "grad.%d", k);
        if (in[k]->requires_grad && !nb_list_get(&R->fix, name))
            fail(R, "input %d has no reference gradient %s", k, name);
    }
    for (int k = 0; params && k < params->n; k++) {
        snprintf(name, sizeof name, "grad.param.%s", nb_list_name(params, k));
        if (!nb_list_get(&R->fix, name))
            fail(R, "parameter '%s' has no reference gradient", nb_list_name(params, k));
    }
}

static bool run_op_or_module(run *R, bool module) {
    const char *what = meta(R, module ? "module" : "op");
    if (!what) {
        bad_arg(R, module ? "module" : "op", NULL);
        return false;
    }
    snprintf(R->r->what, sizeof R->r->what, "%s", what);

    /* in.0, in.1, ...: floating inputs are leaves that require grad */
    nb_tensor *in[MAX_IN];
    int n_in = 0;
    char name[64];
    for (; n_in < MAX_IN; n_in++) {
        snprintf(name, sizeof name, "in.%d", n_in);
        if (!(in[n_in] = nb_list_get(&R->fix, name))) break;
        if (in[n_in]->dtype == R->dt) nb_requires_grad(in[n_in]);
        else if (in[n_in]->dtype == NB_F32 || in[n_in]->dtype == NB_F64)
            return fail(R, "%s is %s in an %s fixture", name, nb_dtype_name(in[n_in]->dtype),
                        nb_dtype_name(R->dt));
    }

    outs o = {0};
    const nb_tensor_list *params = NULL;
    bool found = false, ok = false;
    int min_in = 0, max_in = 0;
    if (module) {
        for (size_t i = 0; i < sizeof MODULES / sizeof MODULES[0]; i++)
            if (strcmp(MODULES[i].name, what) == 0) {
                found = true;
                min_in = MODULES[i].min_in;
                max_in = MODULES[i].max_in;
                if (n_in >= min_in && n_in <= max_in)
                    ok = MODULES[i].fn(R, in, n_in, &o, &params);
            }
    } else {
        for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++)
            if (strcmp(OPS[i].name, what) == 0) {
                found = true;
                op_inputs(&OPS[i], &min_in, &max_in);
                if (n_in >= min_in && n_in <= max_in) ok = op_call(R, &OPS[i], in, n_in, &o);
            }
    }
    if (!found) return fail(R, "unknown %s '%s'", module ? "module" : "op", what);
    if (n_in < min_in || n_in > max_in)
        return fail(R, "%s takes %d to %d inputs, the fixture has %d", what, min_in, max_in,
                    n_in);
    if (nb_ctx_error(R->ctx)) return fail(R, "nabla: %s", nb_ctx_error(R->ctx));
    if (!ok) return false;
    for (int k = 0; k < o.n; k++)
        if (!o.t[k]) return fail(R, "nabla gave no '%s'", o.name[k]);
    if (!backward(R, &o)) return false;

    compare_all(R, &o, in, n_in, params);
    return R->r->passed;
}

static nb_optim *make_optim(run *R, const nb_tensor_list *params) {
    const char *kind = meta(R, "optim");
    double lr = arg_f(R, "lr");
    if (kind && strcmp(kind, "sgd") == 0) {
        nb_sgd_opts o = nb_sgd_defaults(lr);
        o.momentum = arg_f(R, "momentum");
        o.dampening = arg_f(R, "dampening");
        o.weight_decay = arg_f(R, "weight_decay");
        o.nesterov = arg_b(R, "nesterov");
        return R->bad_arg ? NULL : nb_sgd_new(R->ctx, params, o);
    }
    if (kind && (strcmp(kind, "adam") == 0 || strcmp(kind, "adamw") == 0)) {
        nb_adam_opts o = nb_adam_defaults(lr);
        o.beta1 = arg_f(R, "beta1");
        o.beta2 = arg_f(R, "beta2");
        o.eps = arg_f(R, "eps");
        o.weight_decay = arg_f(R, "weight_decay");
        if (R->bad_arg) return NULL;
        return kind[4] ? nb_adamw_new(R->ctx, params, o) : nb_adam_new(R->ctx, params, o);
    }
    bad_arg(R, "optim", kind);
    return NULL;
}

/* The seeds' MultiHeadAttention trained for `steps` steps on mse_loss(m(x), y):
 * compares the loss before every step and the final parameters. */
static bool run_trajectory(run *R) {
    nb_parity_result *r = R->r;
    snprintf(r->what, sizeof r->what, "%s", meta(R, "optim") ? meta(R, "optim") : "?");
    int64_t steps = arg_i(R, "steps");
    nb_tensor *x = nb_list_get(&R->fix, "x"), *y = nb_list_get(&R->fix, "y");
    const nb_tensor *want_losses = nb_list_get(&R->fix, "losses");
    if (!x || !y || !want_losses) return fail(R, "x, y or losses is missing");
    if (R->bad_arg || steps < 1) return fail(R, "bad step count");
    nb_nn_mha *m = make_mha(R, "init.param.");
    nb_optim *opt = m ? make_optim(R, &m->params) : NULL;
    nb_tensor *losses = opt ? nb_empty(R->ctx, R->dt, 1, &steps) : NULL;
    nb_ctx *step = nb_ctx_new(0);
    for (int64_t k = 0; losses && step && k < steps; k++) {
        nb_ctx_reset(step);
        nb_optim_zero_grad(opt);
        nb_tensor *loss = nb_mse_loss(step, nb_nn_mha_forward(step, m, x), y);
        if (nb_backward(step, loss, NULL)) {
            fail(R, "nabla, step %lld: %s", (long long)k + 1, nb_ctx_error(step));
            break;
        }
        nb_set(losses, (size_t)k, nb_item(loss));
        if (nb_optim_step(opt)) {
            fail(R, "nabla, step %lld: %s", (long long)k + 1, nb_ctx_error(R->ctx));
            break;
        }
    }
    if (nb_ctx_error(R->ctx)) fail(R, "nabla: %s", nb_ctx_error(R->ctx));
    if (!step) fail(R, "out of memory");
    if (r->passed) {
        compare(R, "losses", losses, false, want_losses);
        int n_final = 0;
        for (int i = 0; i < R->fix.n; i++)
            if (starts_with(nb_list_name(&R->fix, i), "final.param.")) {
                n_final++;
                compare(R, nb_list_name(&R->fix, i), nb_list_get(&m->params, nb_list_name(&R->fix, i) + 12), false,
                        nb_list_tensor(&R->fix, i));
            }
        if (n_final != m->params.n)
            fail(R, "%d final parameters in the fixture, %d in nabla's module", n_final,
                 m->params.n);
    }
    nb_ctx_free(step);
    nb_optim_free(opt);
    return r->passed;
}

bool nb_parity_run(const char *path, nb_parity_result *r) {
    run R = {0};
    memset(r, 0, sizeof *r);
    r->passed = true;
    r->dtype = NB_F64;
    R.r = r;
    const char *slash = path ? strrchr(path, '/') : NULL;
    R.file = slash ? slash + 1 : path ? path : "(NULL)";
    if (!path) return fail(&R, "NULL path");
    if (!(R.ctx = nb_ctx_new(0))) return fail(&R, "out of memory");
    nb_pcg32_seed(&R.rng, 2024, 1);
    if (nb_load_safetensors_meta(R.ctx, path, &R.fix, MAX_META, &R.n_meta, R.keys, R.values)) {
        fail(&R, "%s", nb_ctx_error(R.ctx));
    } else if (R.n_meta > MAX_META) {
        fail(&R, "%d metadata entries, at most %d are read", R.n_meta, MAX_META);
    } else {
        column_scales(&R);
        const char *kind = meta(&R, "kind"), *label = meta(&R, "case"), *dt = meta(&R, "dtype");
        snprintf(r->kind, sizeof r->kind, "%s", kind ? kind : "?");
        snprintf(r->label, sizeof r->label, "%s", label ? label : R.file);
        bool traj = kind && strcmp(kind, "trajectory") == 0;
        if (dt && strcmp(dt, "f32") == 0) R.dt = NB_F32;
        else if (dt && strcmp(dt, "f64") == 0) R.dt = NB_F64;
        else bad_arg(&R, "dtype", dt);
        r->dtype = R.dt;
        r->tol = R.dt == NB_F64 ? (traj ? 1e-9 : 1e-10) : (traj ? 1e-3 : 1e-5);
        if (R.bad_arg) {
            /* reported */
        } else if (traj) {
            run_trajectory(&R);
        } else if (kind && (strcmp(kind, "op") == 0 || strcmp(kind, "module") == 0)) {
            run_op_or_module(&R, kind[0] == 'm');
        } else {
            bad_arg(&R, "kind", kind);
        }
        if (r->passed && r->n_out == 0) fail(&R, "no output was compared");
    }
    nb_list_free(&R.fix);
    nb_ctx_free(R.ctx);
    return r->passed;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

int nb_parity_list(const char *dir, char (*names)[NB_PARITY_NAME], int max) {
    DIR *d = dir ? opendir(dir) : NULL;
    if (!d) return -1;
    static const char suffix[] = ".safetensors";
    const size_t ns = sizeof suffix - 1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= ns || strcmp(e->d_name + len - ns, suffix) != 0) continue;
        if (len >= NB_PARITY_NAME) continue; /* not one of ours */
        if (n < max) memcpy(names[n], e->d_name, len + 1);
        n++;
    }
    closedir(d);
    qsort(names, (size_t)(n < max ? n : max), NB_PARITY_NAME, cmp_names);
    return n;
}
