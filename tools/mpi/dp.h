/* dp.h - data-parallel training over MPI, for nabla-gpt-mpi and for your
 * own training loop. Not part of libnabla: the library stays free of MPI;
 * compile this file with mpicc beside your program (see `make mpi`).
 *
 * Each rank holds the whole model. The pattern, per training step:
 *
 *   dp_comm m;  dp_init(&argc, &argv, &m);       // once
 *   dp_bcast(&m, &params, false);               // rank 0's init everywhere
 *   dp_share_grads(&m, &params);                // optional: one host's ranks
 *                                                   // reduce in shared memory
 *   for each step:
 *       forward + backward on this rank's slice of the batch
 *       dp_average(&m, &params, true);          // grads := mean over ranks
 *       clip, optimizer step (identical on every rank)
 *       if (dp_agree(&m, failed, msg, sizeof msg)) stop on every rank
 *   dp_check_drift(&m, &params, msg, sizeof msg); // every eval_interval
 *
 * Determinism: dp_average gives every rank the same bits, and the same
 * bits for a given rank count from run to run: the gradients are cut into
 * buckets of at most NB_MPI_BUCKET bytes; in each bucket rank r receives
 * every rank's r-th chunk (MPI_Alltoall), adds them in rank order (0, 1, ...)
 * in double, scales by 1/size and sends its summed chunk to all
 * (MPI_Allgather). That is a reduce-scatter plus all-gather, the same bytes
 * on the wire as a ring allreduce, but with a fixed summation order, which
 * MPI_Allreduce does not promise. An all-float32 list does the same with
 * point-to-point messages of floats, each rank reading and writing its own
 * chunk in place (no copy of it through MPI): the same sums, the same bits. */
#ifndef DP_H
#define DP_H

#include <mpi.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nabla.h"

#define NB_MPI_BUCKET (4u << 20) /* bytes of gradient per message round */

typedef struct dp_comm {
    MPI_Comm comm;
    int rank, size;
    double *send, *recv; /* bucket staging, size * chunk doubles each */
    size_t cap;          /* doubles allocated in send and recv */
    /* dp_share_grads's window (win_on when a list is shared) */
    MPI_Comm node;                /* the ranks of this host, when all are on it */
    MPI_Win win;
    int win_on;
    int shm_refused;              /* the window could not be allocated on every rank */
    const nb_tensor_list *shared; /* the list whose gradients live in the window */
    char **slot;                  /* every rank's copy of the gradients, mapped here */
    size_t *off;                  /* byte offset of each list entry in a slot */
    void **orig;                  /* each entry's own gradient buffer, before sharing */
    /* core lending (dp_share_grads): a waiting rank's core runs a guest
     * thread of a rank still computing */
    MPI_Win ctl_win;
    struct dp_ctl *ctl; /* in shared memory, NULL when lending is off */
    void *guest;            /* this rank's guest thread (a pthread_t), lent cores */
    long lent;              /* times this rank lent its core */
    long meets;             /* barriers met in the shared page */
    double waited_s;        /* seconds spent waiting in them */
    long served;            /* times this rank's guest was woken to work (read after finalize) */
} dp_comm;

/* MPI_Init (when not initialised yet) and the rank/size of MPI_COMM_WORLD.
 * Errors are returned, not aborted on: MPI_ERRORS_RETURN is set. */
int dp_init(int *argc, char ***argv, dp_comm *m);
/* Frees the staging buffers and the shared window (the shared list's
 * gradients are not copied back: see dp_share_grads) and finalises MPI. */
void dp_finalize(dp_comm *m);

/* Rank 0's values (grads=false) or gradients (grads=true) of every tensor in
 * the list, copied to every rank. */
int dp_bcast(dp_comm *m, const nb_tensor_list *l, bool grads);
/* Every tensor's values or gradients replaced by their mean over ranks, in
 * the fixed order described above. Tensors without a gradient take part as
 * zeros (so ranks agree on the layout even when one rank's batch never
 * reached a parameter). */
int dp_average(dp_comm *m, const nb_tensor_list *l, bool grads);

/* Moves the gradients of the list into one shared-memory window (MPI-3
 * MPI_Win_allocate_shared) that every rank maps, when all ranks run on this
 * host; collective. From then on dp_average(m, l, true) reduces them
 * there: rank r reads its 1/size-th of every rank's gradients, sums them
 * in rank order in double, divides, rounds once and writes the mean into
 * every rank's copy; two barriers and no message. The sums are those of
 * the message path, so the bits are the same either way. Each gradient
 * keeps its values; t->grad points into the window until
 * dp_unshare_grads or dp_finalize (free or unshare the tensors'
 * list first: after finalize their gradients must not be touched).
 * Returns 0 also when sharing does not apply (one rank, several hosts,
 * ranks whose lists differ, a list already shared) or when some rank could
 * not allocate the window (m->shm_refused is then set): the message path
 * then serves. 1 when MPI failed or memory for the layout ran out.
 *
 * With the window, ranks also lend their cores (unless NB_MPI_LEND=0): a
 * rank that reaches dp_agree or dp_average before the others does
 * not spin there. It wakes a guest thread of a rank still computing (see
 * nb_set_guest_threads), which takes a share of that rank's ops on the
 * idle core, and sleeps until the last rank arrives. The work is shared as
 * among one process's threads, so the bits do not change; what changes is
 * that one slowed core does not hold every rank back by all of its delay.
 * Linux only (futexes on the shared window). */
int dp_share_grads(dp_comm *m, const nb_tensor_list *l);
/* Copies the shared gradients back into their own buffers and frees the
 * window; collective. */
void dp_unshare_grads(dp_comm *m);

/* A 64-bit FNV-1a hash of every tensor's bytes, in list order. */
uint64_t dp_hash(const nb_tensor_list *l);
/* 0 when every rank holds bit-identical parameters; otherwise 1 on every
 * rank, with a message naming the ranks whose hashes differ from rank 0's. */
int dp_check_drift(dp_comm *m, const nb_tensor_list *l, char *msg, size_t n);

/* Collective error agreement: each rank says whether it failed (and why, in
 * msg). Returns 0 when no rank failed. Otherwise returns 1 on every rank and
 * leaves in msg, on every rank, "rank R: <R's message>" for the lowest
 * failing rank R. */
int dp_agree(dp_comm *m, int failed, char *msg, size_t n);

#endif
