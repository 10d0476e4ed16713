/* custom_op_silu - a user-defined op from start to finish: SiLU,
 *
 *   silu(x) = x · σ(x),   d silu / dx = σ(x) · (1 + x · (1 - σ(x)))
 *
 * with its own forward and backward in float32 and float64 (gradcheck runs
 * in float64, so a custom op must implement both), recorded with nb_record.
 * It then gradchecks the op, shows gradcheck naming a planted wrong backward
 * ("silu_wrong", which forgets the x · σ'(x) term) by name and creation
 * site, and trains a two-layer MLP with SiLU between the layers to fit
 * sin(x): the loss must fall by more than 10×, or the program fails.
 *
 *   build/examples/custom_op_silu [--html=PAGE] [--force]
 *
 * --html writes the tape explorer for one training step (the silu node shows
 * its received and sent gradients like any built-in op). */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "nabla.h"

#include "teach_common.h"

static const char *const usage =
    "usage: custom_op_silu [--html=PAGE] [--dot=GRAPH] [--json=TAPE] [--force]\n"
    "SiLU as a custom op: gradchecked, a wrong backward blamed, an MLP trained.\n"
    "Writes nothing unless asked (the views are of the last training step):\n"
    "  --html=PAGE   the tape explorer: one self-contained HTML page\n"
    "  --dot=GRAPH   the tape as Graphviz\n"
    "  --json=TAPE   the tape's tensors and gradients as JSON\n"
    "  --check-html=PAGE  the explorer of sum(silu_wrong(x) · w): check this op\n"
    "                fails for the planted wrong backward, passes for mul and sum\n"
    "  --force       replace those files if they exist\n";

/* ---- the op: forward and backward side by side, for T = float, double ---- */

/* y[i] = x[i] · σ(x[i]); x, y of n elements */
#define SILU_FORWARD(T)                                              \
    static void silu_forward_##T(T *y, const T *x, size_t n) {      \
        for (size_t i = 0; i < n; i++) y[i] = x[i] / ((T)1 + (T)exp(-(double)x[i])); \
    }
/* dx[i] += dy[i] · σ · (1 + x · (1 - σ)), σ recomputed from x (nothing saved) */
#define SILU_BACKWARD(T)                                                           \
    static void silu_backward_##T(T *dx, const T *dy, const T *x, size_t n) {     \
        for (size_t i = 0; i < n; i++) {                                           \
            T s = (T)1 / ((T)1 + (T)exp(-(double)x[i]));                           \
            dx[i] += dy[i] * s * ((T)1 + x[i] * ((T)1 - s));                       \
        }                                                                          \
    }
/* The planted bug: dx += dy · σ, as if silu were x times a constant. */
#define SILU_WRONG_BACKWARD(T)                                                     \
    static void silu_wrong_backward_##T(T *dx, const T *dy, const T *x, size_t n) { \
        for (size_t i = 0; i < n; i++) dx[i] += dy[i] / ((T)1 + (T)exp(-(double)x[i])); \
    }
SILU_FORWARD(float)
SILU_FORWARD(double)
SILU_BACKWARD(float)
SILU_BACKWARD(double)
SILU_WRONG_BACKWARD(float)
SILU_WRONG_BACKWARD(double)

/* The rules nb_backward calls: read the output's gradient, add into the
 * input's (NULL when it needs none), in the input's dtype. */
typedef void (*silu_rule_float)(float *dx, const float *dy, const float *x, size_t n);
typedef void (*silu_rule_double)(double *dx, const double *dy, const double *x, size_t n);

static void run_rule(nb_ctx *ctx, nb_node *node, silu_rule_float f32, silu_rule_double f64) {
    nb_tensor *x = nb_node_input(node, 0), *y = nb_node_output(node);
    void *dx = nb_grad_buffer(ctx, x);
    if (!dx) return;
    if (x->dtype == NB_F32)
        f32(dx, y->grad, x->data, x->numel);
    else
        f64(dx, y->grad, x->data, x->numel);
}

static void silu_backward(nb_ctx *ctx, nb_node *node) {
    run_rule(ctx, node, silu_backward_float, silu_backward_double);
}

static void silu_wrong_backward(nb_ctx *ctx, nb_node *node) {
    run_rule(ctx, node, silu_wrong_backward_float, silu_wrong_backward_double);
}

/* silu(x): x any shape, F32 or F64 -> same shape and dtype. Errors go on ctx
 * like a built-in op's. */
static nb_tensor *silu_with(nb_ctx *ctx, nb_tensor *x, const char *name, nb_backward_fn rule) {
    if (nb_ctx_status(ctx)) return NULL;
    if (!x) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: input is NULL", name), NULL;
    if (x->dtype != NB_F32 && x->dtype != NB_F64)
        return nb_ctx_fail(ctx, NB_ERR_DTYPE, "%s: dtype %s, expected f32 or f64", name,
                           nb_dtype_name(x->dtype)), NULL;
    nb_tensor *y = nb_empty(ctx, x->dtype, x->ndim, x->shape);
    if (!y) return NULL;
    if (x->dtype == NB_F32)
        silu_forward_float(y->data, x->data, x->numel);
    else
        silu_forward_double(y->data, x->data, x->numel);
    nb_record(ctx, name, y, 1, &x, rule, NULL); /* NULL when x needs no grad: fine */
    return nb_ctx_status(ctx) ? NULL : y;
}

static nb_tensor *silu(nb_ctx *ctx, nb_tensor *x) {
    return silu_with(ctx, x, "silu", silu_backward);
}

/* ---- gradcheck: f(x, w) = sum(silu(x) · w), with the op under test ---- */
static nb_tensor *check_fn(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    bool wrong = user != NULL;
    NB_HERE(ctx);
    nb_tensor *y = silu_with(ctx, in[0], wrong ? "silu_wrong" : "silu",
                             wrong ? silu_wrong_backward : silu_backward);
    return nb_sum(ctx, nb_mul(ctx, y, in[1]));
}

static bool gradchecks(nb_ctx *ctx) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    nb_tensor *x = nb_requires_grad(nb_normal(ctx, NB_F64, NB_SHAPE(3, 4), 0, 2, &rng));
    nb_tensor *w = nb_requires_grad(nb_normal(ctx, NB_F64, NB_SHAPE(3, 4), 0, 1, &rng));
    if (!x || !w) return false;
    nb_gradcheck_result r;
    nb_status right = nb_gradcheck(ctx, check_fn, NULL, 2, (nb_tensor *[]){x, w}, NULL, &r);
    printf("gradcheck silu: %s\n  %s\n", right == NB_OK ? "passed" : "FAILED", r.message);
    static int planted = 1;
    nb_status bad = nb_gradcheck(ctx, check_fn, &planted, 2, (nb_tensor *[]){x, w}, NULL, &r);
    bool blamed = bad == NB_ERR_VALUE && !strcmp(r.blame_op, "silu_wrong") && r.blame_input == 0;
    printf("gradcheck silu_wrong (the planted bug): %s, blamed op #%d '%s' at %s:%d, input %d\n"
           "  %s\n",
           bad == NB_ERR_VALUE ? "failed" : "PASSED", r.blame_index, r.blame_op,
           r.blame_file ? r.blame_file : "?", r.blame_line, r.blame_input, r.message);
    if (blamed) nb_ctx_clear_error(ctx); /* the failure we planted, recorded on ctx */
    return right == NB_OK && blamed;
}

/* --check-html: the tape explorer of f(x, w) with the planted silu_wrong,
 * its "check this op" for every node: silu_wrong fails, mul and sum pass. */
static bool check_page(nb_ctx *ctx, teach_outputs *out, const char *path) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    static nb_tensor *in[2];
    static int planted = 1;
    in[0] = nb_requires_grad(nb_normal(ctx, NB_F64, NB_SHAPE(3, 4), 0, 2, &rng));
    in[1] = nb_requires_grad(nb_normal(ctx, NB_F64, NB_SHAPE(3, 4), 0, 1, &rng));
    if (!in[0] || !in[1]) return false;
    in[0]->name = "x", in[1]->name = "w";
    nb_tensor *y = check_fn(ctx, in, &planted);
    if (!y || nb_backward(ctx, y, NULL)) return false;
    y->name = "f";
    teach_outputs one = {.html = path, .force = out->force, .page = out->page};
    one.page.forward = check_fn, one.page.user = &planted, one.page.n_in = 2, one.page.in = in;
    return write_outputs("custom_op_silu", &one, ctx, y);
}

/* ---- training: y = fc2(silu(fc1(x))) fits sin(x) on [-3, 3] ---- */
static bool train(nb_ctx *params, const teach_outputs *out) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    nb_nn_linear fc1, fc2;
    nb_tensor_list all = {0};
    if (nb_nn_linear_init(params, &fc1, 1, 16, true, NB_F32, &rng) ||
        nb_nn_linear_init(params, &fc2, 16, 1, true, NB_F32, &rng) ||
        nb_params_add_prefixed(params, &all, "fc1", &fc1.params) ||
        nb_params_add_prefixed(params, &all, "fc2", &fc2.params))
        return false;
    nb_optim *opt = nb_adam_new(params, &all, nb_adam_defaults(0.02));
    nb_ctx *step = nb_ctx_new(0);
    double xs[32], ys[32], first = NAN, last = NAN;
    for (int i = 0; i < 32; i++) xs[i] = -3.0 + 6.0 * i / 31, ys[i] = sin(xs[i]);
    bool ok = opt && step;
    for (int it = 0; ok && it < 300; it++) {
        nb_ctx_reset(step);
        nb_optim_zero_grad(opt);
        nb_tensor *x = nb_from_doubles(step, NB_F32, NB_SHAPE(32, 1), xs);
        nb_tensor *y = nb_from_doubles(step, NB_F32, NB_SHAPE(32, 1), ys);
        NB_HERE(step);
        nb_tensor *h = silu(step, nb_nn_linear_forward(step, &fc1, x));
        nb_tensor *loss = nb_mse_loss(step, nb_nn_linear_forward(step, &fc2, h), y);
        ok = loss && !nb_backward(step, loss, NULL);
        if (ok && it == 299) { /* the views, before the step changes the weights */
            loss->name = "loss";
            ok = write_outputs("custom_op_silu", out, step, loss);
        }
        ok = ok && !nb_optim_step(opt);
        if (!ok) break;
        last = nb_item(loss);
        if (it == 0) first = last;
        if (it % 100 == 0) printf("  step %3d  loss %.6f\n", it, last);
    }
    if (nb_ctx_error(step)) fprintf(stderr, "custom_op_silu: %s\n", nb_ctx_error(step));
    printf("training: loss went from %.6f to %.6f in 300 Adam steps\n", first, last);
    nb_optim_free(opt);
    nb_ctx_free(step);
    return ok && last < first / 10;
}

int main(int argc, char **argv) {
    teach_outputs out = {0};
    const char *check_html = NULL;
    int status = parse_args(argc, argv, "custom_op_silu", usage, &out, "check-html", &check_html);
    if (status >= 0) return status;
    nb_ctx *ctx = nb_ctx_new(0), *params = nb_ctx_new(0);
    if (!ctx || !params) return 1;
    /* the same op in both dtypes */
    nb_tensor *x32 = nb_from_doubles(ctx, NB_F32, NB_SHAPE(3), (double[]){-2, 0, 2});
    nb_tensor *x64 = nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){-2, 0, 2});
    printf("silu([-2, 0, 2]) in float32 and float64:\n");
    nb_print(silu(ctx, x32));
    nb_print(silu(ctx, x64));
    bool checked = gradchecks(ctx);
    if (check_html) checked = check_page(ctx, &out, check_html) && checked;
    bool trained = train(params, &out);
    const char *err = nb_ctx_error(ctx) ? nb_ctx_error(ctx) : nb_ctx_error(params);
    if (err) fprintf(stderr, "custom_op_silu: %s\n", err);
    nb_ctx_free(ctx);
    nb_ctx_free(params);
    return checked && trained && !err ? 0 : 1;
}
