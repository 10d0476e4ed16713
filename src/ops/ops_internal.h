/* ops/ops_internal.h - what the op files share with each other and with
 * the modules above them. */
#ifndef NB_OPS_INTERNAL_H
#define NB_OPS_INTERNAL_H

#include "kernels/kernels_internal.h"
#include "tape/tape_internal.h"

/* out[k] = nb_linear(x, w[k], b[k]) for k < n (b NULL: no biases), the
 * float32 products as one job (q, k and v from one x): the same values and
 * the same n recorded nodes as n calls. 0, or -1 with the context's error. */
NB_HIDDEN int nb_linear_n(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w,
                          nb_tensor *const *b, nb_tensor **out);

#endif
