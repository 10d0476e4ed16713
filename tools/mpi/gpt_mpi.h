/* gpt_mpi.h - nabla-gpt-mpi's distributed hooks (a gpt_dist filled with
 * dp_comm calls; see gpt_train.h for what the training loop asks of them). */
#ifndef NB_GPT_MPI_H
#define NB_GPT_MPI_H

#include "gpt_train.h"
#include "dp.h"

/* MPI_Init and a gpt_dist for this rank. 0, or 1 after a message. */
int gpt_mpi_start(int *argc, char ***argv, gpt_dist *d, const char *prog);
/* MPI_Finalize. */
void gpt_mpi_stop(void);

#endif
