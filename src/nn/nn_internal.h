/* nn_internal.h - checks shared by the module files (layers.c,
 * attention.c); defined in layers.c, hidden from users. Each records
 * its error naming the module as PyTorch names the class (`cls`). */
#ifndef NB_NN_INTERNAL_H
#define NB_NN_INTERNAL_H

#include "ops/ops_internal.h"

/* Start of every init: NB_ERR_NULL for a NULL pctx (nothing recorded), the
 * pending status of a pctx that holds an error, an error for a NULL module;
 * otherwise clears the `size` bytes of *m and returns NB_OK. */
NB_HIDDEN nb_status nb_nn_init_begin(nb_ctx *pctx, void *m, size_t size, const char *cls);
/* "cls: what v must be positive" unless v > 0. */
NB_HIDDEN nb_status nb_nn_check_positive(nb_ctx *pctx, const char *cls, const char *what,
                                         int64_t v);
/* dt is F32 or F64. */
NB_HIDDEN nb_status nb_nn_check_param_dtype(nb_ctx *pctx, const char *cls, nb_dtype dt);
/* rng is not NULL. */
NB_HIDDEN nb_status nb_nn_check_rng(nb_ctx *pctx, const char *cls, const nb_pcg32 *rng);
/* Marks t (a new leaf in pctx) as requiring grad, names it and appends it to
 * params; t or NULL (error on pctx). */
NB_HIDDEN nb_tensor *nb_nn_add_param(nb_ctx *pctx, nb_tensor_list *params, const char *name,
                                     nb_tensor *t);
/* Start of every forward: ctx usable, m non-NULL and initialised. */
NB_HIDDEN bool nb_nn_forward_begin(nb_ctx *ctx, const void *m, bool initialised,
                                   const char *cls, const char *init_fn);
/* x is non-NULL with dtype dt. */
NB_HIDDEN bool nb_nn_check_x(nb_ctx *ctx, const char *cls, const nb_tensor *x, nb_dtype dt);
/* x's last dim is `want` (`what` names it in the message). */
NB_HIDDEN bool nb_nn_check_last_dim(nb_ctx *ctx, const char *cls, const nb_tensor *x,
                                    int64_t want, const char *what);

#endif
