/* gpt_train.h - `nabla-gpt train` as a function, so the MPI driver
 * (nabla-gpt-mpi) runs the same loop with its gradient allreduce in the
 * grad_sync hook. Internal to the tools. */
#ifndef NB_GPT_TRAIN_H
#define NB_GPT_TRAIN_H

#include "gpt_flags.h"

/* What a data-parallel driver (nabla-gpt-mpi, tools/mpi/gpt_mpi.c) provides.
 * Every function is collective: all ranks call it at the same point of the
 * loop. Each returns 0, or nonzero (an exit status, after a message) when
 * this or another rank failed; `agree` is how a failing rank tells the
 * others, which meet it inside their next collective call. */
typedef struct gpt_dist {
    int rank, world;
    const char *prog;
    int (*agree)(const struct gpt_dist *d, int failed, char *msg, size_t n);
    int (*bcast)(const struct gpt_dist *d, const nb_tensor_list *params); /* rank 0's values */
    nb_grad_sync_fn grad_sync; /* averages the gradients; sync_user is the gpt_dist */
    int (*mean)(const struct gpt_dist *d, double *v, int n);          /* mean over ranks */
    int (*drift)(const struct gpt_dist *d, const nb_tensor_list *params, long iter);
    int (*gather)(const struct gpt_dist *d, const void *mine, size_t bytes, void *all);
} gpt_dist;

typedef struct gpt_train_hooks {
    nb_grad_sync_fn grad_sync; /* nb_train_step's hook; may be NULL */
    void *sync_user;
    int rank; /* only rank 0 prints and writes files; 0 for a single process */
    int world; /* processes; 1 for a single process. Rank r draws its batches
                  from PCG32 stream seed + r, so each sees different data */
    const gpt_dist *dist; /* NULL for a single process */
} gpt_train_hooks;

/* Runs the training flags `f` describe (see gpt_flags.c and --help) and
 * returns the exit status: 0, GPT_EXIT_USAGE for bad input (message on
 * stderr), 1 for an internal failure. hooks may be NULL (one process). */
int gpt_train_run(const gpt_flags *f, const char *prog, const gpt_train_hooks *hooks);

#endif
