/* gpt_mpi.c - the gpt_dist of nabla-gpt-mpi: nabla-gpt's training loop
 * (tools/support/gpt_train.c) made data-parallel with dp_comm.
 *
 * Every collective call here starts with an error agreement (dp_agree).
 * A rank that fails anywhere calls agree(failed = 1) once and stops; the
 * other ranks meet that call at their next collective, whichever it is, and
 * stop with the failing rank's message. So no rank waits forever for a peer
 * that has given up.
 *
 * Two test seams, read from the environment (tests/mpi/test_mpi.sh):
 *   NB_MPI_TEST_FAIL=R:I   rank R fails at iteration I's gradient sync
 *   NB_MPI_TEST_NUDGE=R:I  rank R adds 1e-6 to its first parameter after
 *                          iteration I's step, so the drift check must fire
 * and two switches: NB_MPI_SHM=0 keeps the gradients out of the shared window
 * (the message path, as across hosts), NB_MPI_LEND=0 keeps a waiting rank's
 * core from the others (dp.h). */
#include "gpt_mpi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct gpt_mpi {
    dp_comm m;
    int failed_reported; /* this rank took part in an agreement that failed */
    long fail_rank, fail_iter, nudge_rank, nudge_iter;
    long sync_calls; /* gradient syncs so far = iterations run in this process */
} gpt_mpi;

static gpt_mpi G;

static void parse_seam(const char *name, long *rank, long *iter) {
    const char *v = getenv(name);
    *rank = *iter = -1;
    if (v && sscanf(v, "%ld:%ld", rank, iter) != 2) *rank = *iter = -1;
}

static int agree(const gpt_dist *d, int failed, char *msg, size_t n) {
    (void)d;
    if (G.failed_reported) return 1; /* the failure is already known to all */
    int bad = dp_agree(&G.m, failed, msg, n);
    if (bad) G.failed_reported = 1;
    return bad;
}

/* Rank 0's parameters everywhere; then, unless NB_MPI_SHM=0, the gradients
 * move into a shared window when every rank is on this host (dp.h). The
 * model is freed before gpt_mpi_stop, so nothing reads them after. */
static int bcast(const gpt_dist *d, const nb_tensor_list *params) {
    char msg[512] = "";
    if (agree(d, 0, msg, sizeof msg)) return gpt_fail(d->prog, "%s", msg);
    if (dp_bcast(&G.m, params, false)) return gpt_fail(d->prog, "MPI_Bcast of the parameters failed");
    const char *shm = getenv("NB_MPI_SHM");
    if (!(shm && strcmp(shm, "0") == 0) && dp_share_grads(&G.m, params))
        return gpt_fail(d->prog, "MPI shared-memory window for the gradients failed");
    if (G.m.shm_refused && G.m.rank == 0)
        fprintf(stderr, "%s: no shared-memory window for the gradients (MPI_Win_allocate_shared "
                "failed on a rank); averaging through messages\n", d->prog);
    return 0;
}

static nb_status grad_sync(const nb_tensor_list *params, void *user) {
    const gpt_dist *d = user;
    char msg[512] = "";
    long it = G.sync_calls++;
    int inject = G.m.rank == G.fail_rank && it == G.fail_iter;
    if (inject) snprintf(msg, sizeof msg, "injected failure at iteration %ld (NB_MPI_TEST_FAIL)", it);
    if (agree(d, inject, msg, sizeof msg)) {
        gpt_fail(d->prog, "%s", msg);
        return NB_ERR_STATE;
    }
    if (dp_average(&G.m, params, true)) {
        gpt_fail(d->prog, "MPI gradient allreduce failed");
        return NB_ERR_IO;
    }
    return NB_OK;
}

static int mean(const gpt_dist *d, double *v, int n) {
    char msg[512] = "";
    if (agree(d, 0, msg, sizeof msg)) return gpt_fail(d->prog, "%s", msg);
    double sum[8];
    if (n > 8 || MPI_Allreduce(v, sum, n, MPI_DOUBLE, MPI_SUM, G.m.comm) != MPI_SUCCESS)
        return gpt_fail(d->prog, "MPI_Allreduce of the losses failed");
    for (int i = 0; i < n; i++) v[i] = sum[i] / G.m.size;
    return 0;
}

static int drift(const gpt_dist *d, const nb_tensor_list *params, long iter) {
    char msg[512] = "";
    if (G.m.rank == G.nudge_rank && iter == G.nudge_iter) {
        nb_tensor *t = nb_list_tensor(params, 0);
        nb_set(t, 0, nb_get(t, 0) + 1e-6);
    }
    if (agree(d, 0, msg, sizeof msg)) return gpt_fail(d->prog, "%s", msg);
    if (dp_check_drift(&G.m, params, msg, sizeof msg)) {
        G.failed_reported = 1; /* every rank saw it */
        return gpt_fail(d->prog, "iter %ld: %s", iter, msg);
    }
    return 0;
}

static int gather(const gpt_dist *d, const void *mine, size_t bytes, void *all) {
    char msg[512] = "";
    if (agree(d, 0, msg, sizeof msg)) return gpt_fail(d->prog, "%s", msg);
    if (MPI_Allgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, G.m.comm) != MPI_SUCCESS)
        return gpt_fail(d->prog, "MPI_Allgather failed");
    return 0;
}

int gpt_mpi_start(int *argc, char ***argv, gpt_dist *d, const char *prog) {
    if (dp_init(argc, argv, &G.m)) {
        fprintf(stderr, "%s: MPI_Init failed\n", prog);
        return 1;
    }
    parse_seam("NB_MPI_TEST_FAIL", &G.fail_rank, &G.fail_iter);
    parse_seam("NB_MPI_TEST_NUDGE", &G.nudge_rank, &G.nudge_iter);
    *d = (gpt_dist){.rank = G.m.rank, .world = G.m.size, .prog = prog, .agree = agree,
                    .bcast = bcast, .grad_sync = grad_sync, .mean = mean, .drift = drift,
                    .gather = gather};
    return 0;
}

/* NB_MPI_STATS=1: each rank says how often it lent its core and how often
 * its guest thread was woken (tests/mpi/test_mpi.sh checks lending runs). */
void gpt_mpi_stop(void) {
    dp_finalize(&G.m);
    const char *st = getenv("NB_MPI_STATS");
    if (st && strcmp(st, "1") == 0)
        fprintf(stderr, "nabla-gpt-mpi: rank %d lent its core %ld times, its guest worked %ld times; "
                "it waited %.3f ms a barrier over %ld barriers\n", G.m.rank, G.m.lent, G.m.served,
                G.m.meets ? G.m.waited_s * 1e3 / (double)G.m.meets : 0.0, G.m.meets);
}
