/* mpi_unit.c - the MPI layer's own checks, run under mpirun by `make test-mpi`
 * (Check's forking runner does not mix with MPI, so this prints the plain
 * "N passed, N failed" line itself; every rank checks, rank 0 reports).
 *
 *   - dp_average: each rank's gradient is a known function of (rank,
 *     element); the result must equal the rank-order sum / size, bit for bit,
 *     over several buckets and a f32 and a f64 tensor, the same on every rank;
 *   - dp_bcast: rank 0's values everywhere;
 *   - dp_check_drift: silent on equal parameters, names the nudged rank;
 *   - dp_agree: no failure -> 0; rank size-1 fails -> every rank gets
 *     "rank R: <its message>". */
#include "dp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static int passed, failed;

static void check(dp_comm *m, int ok_here, const char *what) {
    int ok = 0;
    MPI_Allreduce(&ok_here, &ok, 1, MPI_INT, MPI_MIN, m->comm);
    if (ok) passed++;
    else failed++;
    if (m->rank == 0) printf("%s: %s\n", ok ? "PASS" : "FAIL", what);
}

static double value(int rank, size_t i) { return sin((double)i * 0.37 + rank) * (1.0 + rank); }

/* Every check in turn, each reported by check().
 * Long: the checks share their tensors and lists (each later one reuses the
 * gradients and lists set up before it), and every rank must run the same
 * collective calls in the same order; read top to bottom. */
int main(int argc, char **argv) {
    dp_comm m;
    if (dp_init(&argc, &argv, &m)) return 1;
    nb_ctx *ctx = nb_ctx_new(0);
    /* 700k f64 + 5 f32 elements: three buckets of 512k doubles would be
     * more than one, and the f32 tail crosses a chunk boundary. */
    nb_tensor *a = nb_requires_grad(nb_zeros(ctx, NB_F64, NB_SHAPE(700, 1000)));
    nb_tensor *b = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(5)));
    nb_tensor_list l = {0};
    nb_list_add(&l, "a", a);
    nb_list_add(&l, "b", b);
    for (size_t i = 0; i < a->numel; i++) ((double *)a->grad)[i] = value(m.rank, i);
    for (size_t i = 0; i < b->numel; i++) ((float *)b->grad)[i] = (float)value(m.rank, i + 7);

    int ok = dp_average(&m, &l, true) == 0;
    for (size_t i = 0; ok && i < a->numel; i++) {
        double acc = value(0, i);
        for (int r = 1; r < m.size; r++) acc += value(r, i);
        ok = ((double *)a->grad)[i] == acc / m.size;
    }
    for (size_t i = 0; ok && i < b->numel; i++) {
        double acc = (float)value(0, i + 7);
        for (int r = 1; r < m.size; r++) acc += (float)value(r, i + 7);
        ok = ((float *)b->grad)[i] == (float)(acc / m.size);
    }
    check(&m, ok, "average: rank-order mean, bit for bit, f64 over buckets and f32");

    /* an all-float32 list travels as floats: the same means, rounded once */
    nb_tensor *c = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(1200, 1000)));
    nb_tensor_list lf = {0};
    nb_list_add(&lf, "c", c);
    for (size_t i = 0; i < c->numel; i++) ((float *)c->grad)[i] = (float)value(m.rank, i);
    ok = dp_average(&m, &lf, true) == 0;
    for (size_t i = 0; ok && i < c->numel; i++) {
        double acc = (float)value(0, i);
        for (int r = 1; r < m.size; r++) acc += (float)value(r, i);
        ok = ((float *)c->grad)[i] == (float)(acc / m.size);
    }
    check(&m, ok, "average: a float32 list exchanged as floats, same bits, over buckets");

    /* several float32 tensors of odd sizes, chunks crossing them, and one
     * entry without a gradient (read as zeros, left without one) */
    nb_tensor *t3[4] = {nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(7))),
                        nb_zeros(ctx, NB_F32, NB_SHAPE(5)),
                        nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(300001))),
                        nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(13)))};
    nb_tensor_list lm = {0};
    size_t at = 0;
    static const char *const names3[4] = {"m0", "m1", "m2", "m3"};
    for (int k = 0; k < 4; k++) {
        nb_list_add(&lm, names3[k], t3[k]);
        for (size_t i = 0; t3[k]->grad && i < t3[k]->numel; i++)
            ((float *)t3[k]->grad)[i] = (float)value(m.rank, at + i);
        at += t3[k]->numel;
    }
    ok = dp_average(&m, &lm, true) == 0 && t3[1]->grad == NULL;
    at = 0;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; ok && t3[k]->grad && i < t3[k]->numel; i++) {
            double acc = (float)value(0, at + i);
            for (int r = 1; r < m.size; r++) acc += (float)value(r, at + i);
            ok = ((float *)t3[k]->grad)[i] == (float)(acc / m.size);
        }
        at += t3[k]->numel;
    }
    check(&m, ok, "average: float32 tensors of odd sizes and one without a gradient");

    /* the same lists with their gradients in the shared window: the same
     * bits, and the values kept across sharing and unsharing */
    void *own_grad = c->grad;
    for (size_t i = 0; i < c->numel; i++) ((float *)c->grad)[i] = (float)value(m.rank, i + 3);
    ok = dp_share_grads(&m, &lf) == 0 && (m.size == 1 || c->grad != own_grad);
    for (size_t i = 0; ok && i < c->numel; i++) ok = ((float *)c->grad)[i] == (float)value(m.rank, i + 3);
    ok = ok && dp_average(&m, &lf, true) == 0;
    for (size_t i = 0; ok && i < c->numel; i++) {
        double acc = (float)value(0, i + 3);
        for (int r = 1; r < m.size; r++) acc += (float)value(r, i + 3);
        ok = ((float *)c->grad)[i] == (float)(acc / m.size);
    }
    float first = ((float *)c->grad)[0];
    dp_unshare_grads(&m);
    ok = ok && c->grad == own_grad && ((float *)c->grad)[0] == first;
    check(&m, ok, "average in shared memory: float32, same bits as the messages, unshared intact");

    for (size_t i = 0; i < a->numel; i++) ((double *)a->grad)[i] = value(m.rank, i + 1);
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; t3[k]->grad && i < t3[k]->numel; i++)
            ((float *)t3[k]->grad)[i] = (float)value(m.rank, i + 11 * k);
    nb_tensor_list lx = {0}; /* f64, f32 with odd sizes, an entry without a gradient */
    nb_list_add(&lx, "a", a);
    for (int k = 0; k < 4; k++) nb_list_add(&lx, names3[k], t3[k]);
    ok = dp_share_grads(&m, &lx) == 0 && t3[1]->grad == NULL;
    ok = ok && dp_average(&m, &lx, true) == 0;
    for (size_t i = 0; ok && i < a->numel; i++) {
        double acc = value(0, i + 1);
        for (int r = 1; r < m.size; r++) acc += value(r, i + 1);
        ok = ((double *)a->grad)[i] == acc / m.size;
    }
    for (int k = 0; k < 4; k++)
        for (size_t i = 0; ok && t3[k]->grad && i < t3[k]->numel; i++) {
            double acc = (float)value(0, i + 11 * k);
            for (int r = 1; r < m.size; r++) acc += (float)value(r, i + 11 * k);
            ok = ((float *)t3[k]->grad)[i] == (float)(acc / m.size);
        }
    dp_unshare_grads(&m);
    check(&m, ok, "average in shared memory: float64 and float32 mixed, odd sizes, a missing gradient");

    for (size_t i = 0; i < a->numel; i++) ((double *)a->data)[i] = value(m.rank, i);
    ok = dp_bcast(&m, &l, false) == 0;
    for (size_t i = 0; ok && i < a->numel; i++) ok = ((double *)a->data)[i] == value(0, i);
    check(&m, ok, "bcast: rank 0's values on every rank");

    char msg[256] = "";
    check(&m, dp_check_drift(&m, &l, msg, sizeof msg) == 0, "drift: equal parameters pass");
    if (m.rank == m.size - 1 && m.size > 1) ((double *)a->data)[12345] += 1e-12;
    int drift = dp_check_drift(&m, &l, msg, sizeof msg);
    char want[64];
    snprintf(want, sizeof want, "ranks %d differ", m.size - 1);
    check(&m, m.size == 1 || (drift == 1 && strstr(msg, want)), "drift: a nudged rank is named");

    snprintf(msg, sizeof msg, "nothing");
    check(&m, dp_agree(&m, 0, msg, sizeof msg) == 0, "agree: no rank failed");
    snprintf(msg, sizeof msg, "bad data in batch 3");
    int bad = dp_agree(&m, m.rank == m.size - 1, msg, sizeof msg);
    snprintf(want, sizeof want, "rank %d: bad data in batch 3", m.size - 1);
    check(&m, bad == 1 && strcmp(msg, want) == 0, "agree: every rank gets the failing rank's message");

    nb_ctx_free(ctx);
    if (m.rank == 0) printf("mpi_unit (%d ranks): %d passed, %d failed\n", m.size, passed, failed);
    dp_finalize(&m);
    return failed != 0;
}
