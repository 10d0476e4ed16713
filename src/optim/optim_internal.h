/* optim/optim_internal.h - what the optimizers share with the training
 * step and with the checkpoint code in io/. */
#ifndef NB_OPTIM_INTERNAL_H
#define NB_OPTIM_INTERNAL_H

#include "core/core_internal.h"

/* Does the optimizer update exactly these tensors under these names
 * (train/optim.c, for checkpoints)? why[] names the first difference. */
NB_HIDDEN bool nb_optim_matches(const nb_optim *o, const nb_tensor_list *params, char *why,
                                size_t n);


/* fn(t, lo, hi, arg) over ranges of the elements of every float gradient in
 * the list (entries without one skipped), split over the pool's threads;
 * each range lies within one tensor. For elementwise work only: which
 * thread takes which range varies. In train/optim.c, beside clipping. */
typedef void (*nb_grad_range_fn)(nb_tensor *t, size_t lo, size_t hi, void *arg);
NB_HIDDEN void nb_grad_ranges(const nb_tensor_list *l, nb_grad_range_fn fn, void *arg);

#endif
