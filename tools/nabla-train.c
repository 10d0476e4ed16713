/* nabla-train - trains the seed notebooks' MultiHeadAttention on one batch
 * with MSE loss, from PyTorch weights in safetensors files, and writes the
 * trained weights and the loss curve back in PyTorch's names.
 *
 *   nabla-train --init INIT.safetensors --data DATA.safetensors --heads H
 *               [--qkv-bias] --optim sgd|adam|adamw --lr LR [--momentum M]
 *               [--weight-decay WD] --steps N [--dtype f32|f64]
 *               --out OUT.safetensors
 *
 * Each step is PyTorch's
 *   loss = F.mse_loss(mha(x), y); opt.zero_grad(); loss.backward(); opt.step()
 * with the causal mask and dropout 0, so a PyTorch run of the same model,
 * data and optimizer gives the same weights and losses (up to rounding; see
 * tools/ref/gen_train_fixtures.py and tests/check_train_tool.c).
 *
 * Exit status: 0 on success, 2 for bad usage or bad input (flags, missing or
 * misshapen tensors, unreadable INIT/DATA, unwritable OUT), 1 if training
 * itself fails (an internal error). Messages go to stderr. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"

#define PROG "nabla-train"
#define EXIT_USAGE 2

static const char USAGE[] =
    "usage: " PROG " --init INIT.safetensors --data DATA.safetensors --heads H [--qkv-bias]\n"
    "                   --optim sgd|adam|adamw --lr LR [--momentum M] [--weight-decay WD]\n"
    "                   --steps N [--dtype f32|f64] --out OUT.safetensors\n"
    "\n"
    "Trains a MultiHeadAttention (the seed notebooks' class: W_query, W_key, W_value,\n"
    "causal mask, out_proj) for N full-batch steps of mean-squared-error loss.\n"
    "\n"
    "  --init FILE      the model's parameters under PyTorch's state_dict names:\n"
    "                   W_query.weight, W_key.weight, W_value.weight (d_out, d_in),\n"
    "                   W_query.bias, W_key.bias, W_value.bias (d_out) with --qkv-bias,\n"
    "                   out_proj.weight (d_out, d_out), out_proj.bias (d_out). F32\n"
    "                   or F64. A \"mask\" buffer is ignored, and so is \"loss\": an\n"
    "                   OUT file can be the INIT of a further run.\n"
    "  --data FILE      x (B, T, d_in) and y (B, T, d_out), F32 or F64; the context\n"
    "                   length is T\n"
    "  --heads H        number of heads; must divide d_out\n"
    "  --qkv-bias       W_query, W_key, W_value have biases\n"
    "  --optim NAME     sgd, adam or adamw (PyTorch's update rules)\n"
    "  --lr LR          learning rate\n"
    "  --momentum M     SGD momentum (default 0; sgd only)\n"
    "  --weight-decay WD  default 0 for sgd and adam, 0.01 for adamw\n"
    "                   (Adam/AdamW: betas (0.9, 0.999), eps 1e-8)\n"
    "  --steps N        number of optimizer steps (N >= 1)\n"
    "  --dtype f32|f64  computation dtype (default f32, like PyTorch); inputs are\n"
    "                   converted to it\n"
    "  --out FILE       written atomically: the trained parameters under the same\n"
    "                   names, plus loss (N), each step's loss before its update,\n"
    "                   in the computation dtype\n"
    "  --help           this text\n"
    "\n"
    "Exit status: 0 success, 2 bad usage or input, 1 internal failure.\n";

/* Prints "nabla-train: <message>" and returns the usage exit status. */
static int fail(const char *fmt, ...) NB_PRINTF_LIKE(1, 2);
static int fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, PROG ": ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return EXIT_USAGE;
}

/* ---- arguments ------------------------------------------------------------------ */
typedef struct args {
    const char *init, *data, *out, *optim;
    long heads, steps;
    bool qkv_bias;
    double lr, momentum, weight_decay;
    bool has_lr, has_momentum, has_weight_decay;
    nb_dtype dt;
} args;

static bool parse_double(const char *s, double *v) {
    char *end;
    errno = 0;
    *v = strtod(s, &end);
    return *s && !*end && errno == 0 && isfinite(*v);
}

static bool parse_long(const char *s, long *v) {
    char *end;
    errno = 0;
    *v = strtol(s, &end, 10);
    return *s && !*end && errno == 0;
}

/* 0 when the arguments are complete and valid, 1 after --help, else the
 * usage status (with a message printed). */
static int parse_args(int argc, char **argv, args *a) {
    *a = (args){.dt = NB_F32, .heads = -1, .steps = -1};
    const char *heads = NULL, *steps = NULL, *dtype = NULL;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (!strcmp(flag, "--help") || !strcmp(flag, "-h")) {
            fputs(USAGE, stdout);
            return 1;
        }
        if (!strcmp(flag, "--qkv-bias")) {
            a->qkv_bias = true;
            continue;
        }
        static const char *const with_value[] = {"--init", "--data", "--out", "--optim",
                                                 "--heads", "--steps", "--lr", "--momentum",
                                                 "--weight-decay", "--dtype"};
        /* --flag VALUE or --flag=VALUE */
        const char *value = NULL;
        size_t flen = strcspn(flag, "=");
        int which = -1;
        for (int k = 0; k < (int)(sizeof with_value / sizeof *with_value); k++)
            if (strlen(with_value[k]) == flen && !strncmp(flag, with_value[k], flen)) which = k;
        if (which < 0)
            return fail("unknown argument '%s' (try --help)", flag);
        if (flag[flen] == '=')
            value = flag + flen + 1;
        else if (i + 1 < argc)
            value = argv[++i];
        else
            return fail("%s needs a value", with_value[which]);
        double d;
        switch (which) {
        case 0: a->init = value; break;
        case 1: a->data = value; break;
        case 2: a->out = value; break;
        case 3: a->optim = value; break;
        case 4: heads = value; break;
        case 5: steps = value; break;
        case 6:
        case 7:
        case 8:
            if (!parse_double(value, &d))
                return fail("%s: '%s' is not a finite number", with_value[which], value);
            if (which == 6) a->lr = d, a->has_lr = true;
            if (which == 7) a->momentum = d, a->has_momentum = true;
            if (which == 8) a->weight_decay = d, a->has_weight_decay = true;
            break;
        default: dtype = value; break;
        }
    }
    static const char *const required[] = {"--init", "--data", "--heads", "--optim", "--lr",
                                           "--steps", "--out"};
    const bool given[] = {a->init, a->data, heads, a->optim, a->has_lr, steps, a->out};
    for (int k = 0; k < 7; k++)
        if (!given[k]) return fail("missing required flag %s (try --help)", required[k]);
    if (!parse_long(heads, &a->heads) || a->heads < 1 || a->heads > INT_MAX)
        return fail("--heads: '%s' is not a positive integer", heads);
    if (!parse_long(steps, &a->steps) || a->steps < 1 || a->steps > INT32_MAX)
        return fail("--steps: '%s' is not a positive integer", steps);
    if (strcmp(a->optim, "sgd") && strcmp(a->optim, "adam") && strcmp(a->optim, "adamw"))
        return fail("--optim: '%s' is not one of sgd, adam, adamw", a->optim);
    if (a->has_momentum && strcmp(a->optim, "sgd"))
        return fail("--momentum applies to --optim sgd only (got --optim %s)", a->optim);
    if (dtype) {
        if (!strcmp(dtype, "f32") || !strcmp(dtype, "float32"))
            a->dt = NB_F32;
        else if (!strcmp(dtype, "f64") || !strcmp(dtype, "float64"))
            a->dt = NB_F64;
        else
            return fail("--dtype: '%s' is not f32 or f64", dtype);
    }
    return 0;
}

/* ---- inputs ------------------------------------------------------------------------ */
static const char *shape_of(const nb_tensor *t, char *buf, size_t n) {
    return nb_shape_str(t, buf, n);
}

/* The floating tensor `name` of `l` with the given shape (ndim entries),
 * or NULL after printing why. */
static nb_tensor *need(const nb_tensor_list *l, const char *file, const char *name, int ndim,
                       const int64_t *shape) {
    nb_tensor *t = nb_list_get(l, name);
    if (!t) {
        fail("%s: no tensor '%s'", file, name);
        return NULL;
    }
    if (t->dtype != NB_F32 && t->dtype != NB_F64) {
        fail("%s: '%s' has dtype %s, expected F32 or F64", file, name, nb_dtype_name(t->dtype));
        return NULL;
    }
    bool ok = t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = shape[d] < 0 || t->shape[d] == shape[d];
    if (!ok) {
        char got[64], want[64] = "(";
        size_t k = 1;
        for (int d = 0; d < ndim; d++)
            k += (size_t)(shape[d] < 0
                              ? snprintf(want + k, sizeof want - k, "%s*", d ? ", " : "")
                              : snprintf(want + k, sizeof want - k, "%s%lld", d ? ", " : "",
                                         (long long)shape[d]));
        snprintf(want + k, sizeof want - k, ")");
        fail("%s: '%s' has shape %s, expected %s", file, name, shape_of(t, got, sizeof got),
             want);
        return NULL;
    }
    return t;
}

static const char *const QKV[3] = {"W_query", "W_key", "W_value"};

/* Checks INIT and DATA against each other and the flags; fills the sizes. */
static int check_inputs(const args *a, const nb_tensor_list *init, const nb_tensor_list *data,
                        int64_t *d_in, int64_t *d_out) {
    const nb_tensor *wq = nb_list_get(init, "W_query.weight");
    if (!wq) return fail("%s: no tensor 'W_query.weight'", a->init);
    if (wq->ndim != 2) {
        char b[64];
        return fail("%s: 'W_query.weight' has shape %s, expected (d_out, d_in)", a->init,
                    shape_of(wq, b, sizeof b));
    }
    *d_out = wq->shape[0];
    *d_in = wq->shape[1];
    char name[64];
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "%s.weight", QKV[k]);
        if (!need(init, a->init, name, 2, (int64_t[]){*d_out, *d_in})) return EXIT_USAGE;
        snprintf(name, sizeof name, "%s.bias", QKV[k]);
        if (a->qkv_bias && !need(init, a->init, name, 1, (int64_t[]){*d_out}))
            return EXIT_USAGE;
        if (!a->qkv_bias && nb_list_get(init, name))
            return fail("%s: has '%s' but --qkv-bias was not given", a->init, name);
    }
    if (!need(init, a->init, "out_proj.weight", 2, (int64_t[]){*d_out, *d_out}) ||
        !need(init, a->init, "out_proj.bias", 1, (int64_t[]){*d_out}))
        return EXIT_USAGE;
    for (int i = 0; i < init->n; i++) {
        const char *n = nb_list_name(init, i);
        bool known = !strcmp(n, "mask") || !strcmp(n, "loss") ||
                     !strcmp(n, "out_proj.weight") || !strcmp(n, "out_proj.bias");
        for (int k = 0; k < 3 && !known; k++) {
            size_t len = strlen(QKV[k]);
            known = !strncmp(n, QKV[k], len) &&
                    (!strcmp(n + len, ".weight") || !strcmp(n + len, ".bias"));
        }
        if (!known)
            return fail("%s: unexpected tensor '%s' (not a MultiHeadAttention parameter)",
                        a->init, n);
    }
    if (*d_out % a->heads)
        return fail("--heads %ld does not divide d_out = %lld (from W_query.weight)", a->heads,
                    (long long)*d_out);
    const nb_tensor *x = need(data, a->data, "x", 3, (int64_t[]){-1, -1, *d_in});
    if (!x) return EXIT_USAGE;
    if (!need(data, a->data, "y", 3, (int64_t[]){x->shape[0], x->shape[1], *d_out}))
        return EXIT_USAGE;
    return 0;
}

static int load(nb_ctx *ctx, const char *what, const char *path, nb_tensor_list *l) {
    if (nb_load_safetensors(ctx, path, l))
        return fail("cannot read %s: %s", what, nb_ctx_error(ctx));
    return 0;
}

/* ---- training ------------------------------------------------------------------------ */
/* err also receives the optimizer's later errors (nb_optim_step). */
static nb_optim *make_optimizer(nb_ctx *err, const args *a, const nb_tensor_list *params) {
    if (!strcmp(a->optim, "sgd")) {
        nb_sgd_opts o = nb_sgd_defaults(a->lr);
        if (a->has_momentum) o.momentum = a->momentum;
        if (a->has_weight_decay) o.weight_decay = a->weight_decay;
        return nb_sgd_new(err, params, o);
    }
    bool w = !strcmp(a->optim, "adamw");
    nb_adam_opts o = w ? nb_adamw_defaults(a->lr) : nb_adam_defaults(a->lr);
    if (a->has_weight_decay) o.weight_decay = a->weight_decay;
    return w ? nb_adamw_new(err, params, o) : nb_adam_new(err, params, o);
}

/* Runs the steps, writing each step's loss into losses (N). 0 or 1. The
 * optimizer's errors are on ctx, the context it was made with. */
static int train(nb_ctx *ctx, const args *a, nb_nn_mha *mha, nb_optim *opt, nb_tensor *x,
                 nb_tensor *y, nb_tensor *losses) {
    nb_ctx *step = nb_ctx_new(0);
    int rc = 0;
    for (long s = 0; s < a->steps && !rc; s++) {
        nb_ctx_reset(step);
        nb_tensor *out = nb_nn_mha_forward(step, mha, x);
        nb_tensor *loss = nb_mse_loss(step, out, y);
        nb_optim_zero_grad(opt);
        if (!loss || nb_backward(step, loss, NULL)) {
            fprintf(stderr, PROG ": step %ld: %s\n", s + 1, nb_ctx_error(step));
            rc = 1;
        } else if (nb_optim_step(opt)) {
            fprintf(stderr, PROG ": step %ld: %s\n", s + 1, nb_ctx_error(ctx));
            rc = 1;
        } else {
            nb_set(losses, (size_t)s, nb_item(loss));
        }
    }
    nb_ctx_free(step);
    return rc;
}

/* run with the --init and --data lists (empty; the caller frees them). */
static int run_with(const args *a, nb_ctx *ctx, nb_tensor_list *init, nb_tensor_list *data) {
    int rc = load(ctx, "--init", a->init, init);
    if (!rc) rc = load(ctx, "--data", a->data, data);
    int64_t d_in = 0, d_out = 0;
    if (!rc) rc = check_inputs(a, init, data, &d_in, &d_out);
    if (rc) return rc;
    nb_tensor *x = nb_copy(ctx, nb_list_get(data, "x"), a->dt);
    nb_tensor *y = nb_copy(ctx, nb_list_get(data, "y"), a->dt);
    nb_pcg32 rng; /* draws the initial weights, which INIT then replaces */
    nb_pcg32_seed(&rng, 0, 0);
    nb_nn_mha mha;
    if (!x || !y ||
        nb_nn_mha_init(ctx, &mha, d_in, d_out, x->shape[1], 0.0, (int)a->heads, a->qkv_bias,
                       a->dt, &rng) ||
        nb_params_copy_from(&mha.params, init))
        return fail("%s", nb_ctx_error(ctx));
    nb_optim *opt = make_optimizer(ctx, a, &mha.params);
    if (!opt) return fail("%s", nb_ctx_error(ctx));
    nb_tensor *losses = nb_empty(ctx, a->dt, NB_SHAPE(a->steps));
    if (!losses) {
        nb_optim_free(opt);
        return fail("%s", nb_ctx_error(ctx));
    }
    rc = train(ctx, a, &mha, opt, x, y, losses);
    nb_optim_free(opt);
    if (rc) return rc;

    nb_tensor_list out = mha.params;
    nb_list_add(&out, "loss", losses);
    char steps[32];
    snprintf(steps, sizeof steps, "%ld", a->steps);
    const char *keys[] = {"generator", "optimizer", "steps", "dtype"};
    const char *values[] = {PROG " " NB_VERSION, a->optim, steps, nb_dtype_name(a->dt)};
    if (nb_save_safetensors(ctx, a->out, &out, 4, keys, values))
        return fail("cannot write --out: %s", nb_ctx_error(ctx));
    printf(PROG ": %ld steps of %s (%s): loss %.6g -> %.6g; wrote %s\n", a->steps, a->optim,
           nb_dtype_name(a->dt), nb_get(losses, 0), nb_get(losses, (size_t)a->steps - 1),
           a->out);
    return 0;
}

static int run(const args *a, nb_ctx *ctx) {
    nb_tensor_list init = {0}, data = {0};
    int rc = run_with(a, ctx, &init, &data);
    nb_list_free(&init);
    nb_list_free(&data);
    return rc;
}

int main(int argc, char **argv) {
    args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    nb_ctx *ctx = nb_ctx_new(0);
    if (!ctx) {
        fail("out of memory");
        return 1;
    }
    rc = run(&a, ctx);
    nb_ctx_free(ctx);
    return rc;
}
