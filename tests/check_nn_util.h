/* check_nn_util.h - helpers for the module suites (check_nn.c,
 * check_attention.c): gradient checks with respect to a module's
 * parameters, and loading parameter values by name. */
#ifndef CHECK_NN_UTIL_H
#define CHECK_NN_UTIL_H

#include "check_nabla.h"

#define NN_BIND_MAX 32

/* nb_gradcheck hands the checked function float64 copies of its inputs. To
 * differentiate with respect to a module's parameters, pass the parameters
 * as inputs and, inside the function, make the module's parameter tensors
 * alias those copies (same data and grad buffers): nn_bind. The module must
 * be float64. nn_unbind restores the module afterwards. */
typedef struct nn_binding {
    const nb_tensor_list *params;
    int n;
    nb_tensor saved[NN_BIND_MAX];
} nn_binding;

static inline void nn_bind_init(nn_binding *b, const nb_tensor_list *params) {
    b->params = params;
    b->n = params->n;
    ck_assert_int_le(b->n, NN_BIND_MAX);
    for (int k = 0; k < b->n; k++) b->saved[k] = *params->t[k];
}

/* in[0..n-1] are the copies of params->t[0..n-1], in list order. */
static inline void nn_bind(const nn_binding *b, nb_tensor *const *in) {
    for (int k = 0; k < b->n; k++) *b->params->t[k] = *in[k];
}

static inline void nn_unbind(const nn_binding *b) {
    for (int k = 0; k < b->n; k++) *b->params->t[k] = b->saved[k];
}

/* Copies vals[i] (row-major doubles) into the parameter named names[i] of
 * params, through nb_params_copy_from. */
static inline void nn_load(const nb_tensor_list *params, int n, const char *const *names,
                           const double *const *vals) {
    nb_ctx *tmp = nb_ctx_new(0);
    nb_tensor_list src = {0};
    for (int i = 0; i < n; i++) {
        nb_tensor *d = nb_list_get(params, names[i]);
        ck_assert_msg(d != NULL, "no parameter named '%s'", names[i]);
        nb_tensor *t = nb_from_doubles(tmp, NB_F64, d->ndim, d->shape, vals[i]);
        ck_assert_int_eq(nb_list_add(&src, names[i], t), NB_OK);
    }
    ck_assert_int_eq(nb_params_copy_from(params, &src), NB_OK);
    nb_ctx_free(tmp);
}

/* The list's names are exactly want[0..n-1], in order. */
static inline void nn_assert_names(const nb_tensor_list *params, int n,
                                   const char *const *want) {
    ck_assert_int_eq(params->n, n);
    for (int i = 0; i < n; i++) ck_assert_str_eq(params->names[i], want[i]);
}

/* Gradient check of f with PyTorch's default tolerances; on failure the
 * message names the worst entry. */
static inline void nn_gradcheck(nb_gradcheck_fn f, void *user, int n, nb_tensor *const *in) {
    nb_gradcheck_result r;
    nb_ctx *ctx = nb_ctx_new(0); /* records a failure's message */
    nb_status st = nb_gradcheck(ctx, f, user, n, in, NULL, &r);
    ck_assert_msg(st == NB_OK && r.passed, "gradcheck: %s", r.message);
    nb_ctx_free(ctx);
}

#endif
