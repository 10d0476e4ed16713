/* seed_common.h - what the seed walkthroughs (examples/seed_*.c) share: the
 * six-token input of the notebooks, a load_state_dict for PyTorch's values,
 * shapes printed beside torch.Size, and the error check at the end. Everything is static, so each
 * example includes this header and uses what it needs; nothing here is part
 * of the library. */
#ifndef NB_SEED_COMMON_H
#define NB_SEED_COMMON_H

#include <stdio.h>

#include "nabla.h"

/* "Your journey starts with one step", embedded in 3 dims: (6, 3). */
static const double inputs_data[6 * 3] = {
    0.43, 0.15, 0.89, /* Your     (x^1) */
    0.55, 0.87, 0.66, /* journey  (x^2) */
    0.57, 0.85, 0.64, /* starts   (x^3) */
    0.22, 0.58, 0.33, /* with     (x^4) */
    0.77, 0.25, 0.10, /* one      (x^5) */
    0.05, 0.80, 0.55, /* step     (x^6) */
};

/* Copies PyTorch's values (row-major) into the parameters called names[i],
 * like load_state_dict; a missing name is an error on the module's context. */
static inline void load(nb_ctx *ctx, const nb_tensor_list *dst, int n, const char *const *names,
                        const double *const *values) {
    nb_tensor_list src = {0};
    for (int i = 0; i < n; i++) {
        const nb_tensor *d = nb_list_get(dst, names[i]);
        if (d)
            nb_list_add(&src, names[i],
                        nb_from_doubles(ctx, d->dtype, d->ndim, d->shape, values[i]));
    }
    nb_params_copy_from(dst, &src);
}

/* "name.shape: (6, 2)   # torch.Size([6, 2])" */
static inline void print_shape(const char *name, const nb_tensor *t) {
    char s[64];
    nb_shape_str(t, s, sizeof s);
    printf("%s.shape: %s   # torch.Size([", name, s);
    for (int d = 0; t && d < t->ndim; d++) printf("%s%lld", d ? ", " : "", (long long)t->shape[d]);
    printf("])\n");
}

/* The end of a walkthrough: prints the first error (the parameters'
 * context first) on stderr, frees both contexts, and returns the exit
 * status: `status`, or 1 after an error. */
static inline int finish(nb_ctx *ctx, nb_ctx *params, int status) {
    const char *err = nb_ctx_error(params) ? nb_ctx_error(params) : nb_ctx_error(ctx);
    if (err) {
        fprintf(stderr, "error: %s\n", err);
        status = 1;
    }
    nb_ctx_free(ctx);
    nb_ctx_free(params);
    return status;
}

#endif
