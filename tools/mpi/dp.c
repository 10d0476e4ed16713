/* dp.c - parameter broadcast, deterministic gradient averaging, drift
 * checks and error agreement over MPI (see dp.h). */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_setaffinity, syscall */
#endif
#include "dp.h"
#include "now.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __linux__
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#define DP_CAN_LEND 1
#else
#define DP_CAN_LEND 0
#endif

/* ---- core lending ------------------------------------------------------------
 * One page of shared memory holds a barrier (a generation and an arrival
 * count) and, per rank, whether it has arrived and whether its guest thread
 * should work. A rank arriving early spins a little, then sets a computing
 * rank's `go`, wakes that rank's guest thread and sleeps on the generation;
 * the last rank to arrive clears the arrivals, bumps the generation and
 * wakes the sleepers. A rank stops its own guest when it arrives (its ops
 * are done), and a lender clears what it lent when it leaves. */
#define LEND_MAX_RANKS 64
#define LEND_SPIN_NS 30000 /* a waiting rank spins this long before it lends its core
                            * (NB_MPI_LEND_SPIN_NS overrides it; the tests use 0) */

struct dp_ctl {
    _Atomic int gen, arrived;
    double spin_ns; /* set by rank 0 before the guests start */
    _Atomic int here[LEND_MAX_RANKS], go[LEND_MAX_RANKS];
    _Atomic int quit[LEND_MAX_RANKS]; /* rank r's guest thread is to end */
};

#if DP_CAN_LEND
static void futex_wait(_Atomic int *a, int v) {
    syscall(SYS_futex, (int *)a, FUTEX_WAIT, v, NULL, NULL, 0);
}
static void futex_wake(_Atomic int *a) {
    syscall(SYS_futex, (int *)a, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Spins up to spin_ns while *a == v; true when it changed. */
static bool spin_until_changed(_Atomic int *a, int v, double spin_ns) {
    double end = now_s() + spin_ns * 1e-9;
    for (int i = 0;; i++) {
        if (atomic_load(a) != v) return true;
        if ((i & 63) == 63 && now_s() > end) return false;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static void lend_wait(dp_comm *m) {
    struct dp_ctl *c = m->ctl;
    int g = atomic_load(&c->gen);
    atomic_store(&c->go[m->rank], 0); /* this rank's ops are done: its guest stops */
    atomic_store(&c->here[m->rank], 1);
    if (atomic_fetch_add(&c->arrived, 1) + 1 == m->size) {
        for (int s = 0; s < m->size; s++) atomic_store(&c->here[s], 0);
        atomic_store(&c->arrived, 0);
        atomic_store(&c->gen, g + 1);
        futex_wake(&c->gen);
        return;
    }
    if (spin_until_changed(&c->gen, g, c->spin_ns)) return;
    int lent = -1;
    for (int k = 1; k < m->size && lent < 0; k++) {
        int s = (m->rank + k) % m->size, no = 0;
        if (!atomic_load(&c->here[s]) && atomic_compare_exchange_strong(&c->go[s], &no, 1)) {
            futex_wake(&c->go[s]);
            lent = s;
            m->lent++;
        }
    }
    while (atomic_load(&c->gen) == g) futex_wait(&c->gen, g);
    if (lent >= 0) atomic_store(&c->go[lent], 0);
}

/* This rank's guest: asleep until a waiting rank sets its go, then a guest
 * of this process's thread pool until go is cleared. It may run on any
 * core (mpirun binds the rank to one): the lender's is the idle one. */
static void *guest_main(void *arg) {
    dp_comm *m = arg;
    struct dp_ctl *c = m->ctl;
    _Atomic int *go = &c->go[m->rank];
    cpu_set_t all;
    CPU_ZERO(&all);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++) CPU_SET((int)i, &all);
    sched_setaffinity(0, sizeof all, &all); /* best effort */
    for (;;) {
        while (!atomic_load(go) && !atomic_load(&c->quit[m->rank])) futex_wait(go, 0);
        if (atomic_load(&c->quit[m->rank])) break;
        m->served++;
        nb_guest_serve(0, go);
    }
    return NULL;
}
#endif

static void lend_stop(dp_comm *m);

/* NB_MPI_LEND_SPIN_NS when it is a number of 0 .. 1e9, else LEND_SPIN_NS. */
static double spin_from_env(void) {
    const char *sp = getenv("NB_MPI_LEND_SPIN_NS");
    char *end = NULL;
    double v = sp ? strtod(sp, &end) : 0;
    return sp && end != sp && !*end && v >= 0 && v <= 1e9 ? v : LEND_SPIN_NS;
}

/* Collective over the host's ranks (the window's): the page, zeroed, and
 * a guest thread per rank. Off when any rank says NB_MPI_LEND=0, on more
 * than LEND_MAX_RANKS ranks, or where futexes are missing; lending is an
 * optimisation, so failing to set it up just leaves it off. */
static void lend_start(dp_comm *m) {
    const char *e = getenv("NB_MPI_LEND");
    int want = DP_CAN_LEND && !(e && strcmp(e, "0") == 0) && m->size <= LEND_MAX_RANKS, all = 0;
    MPI_Allreduce(&want, &all, 1, MPI_INT, MPI_MIN, m->comm);
    if (!all) return;
    struct dp_ctl *base = NULL;
    MPI_Aint sz = m->rank == 0 ? (MPI_Aint)sizeof *base : 0;
    int ok = MPI_Win_allocate_shared(sz, 1, MPI_INFO_NULL, m->node, &base, &m->ctl_win) ==
             MPI_SUCCESS, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, m->comm);
    if (!all_ok) {
        if (ok) MPI_Win_free(&m->ctl_win);
        return;
    }
    MPI_Aint qs;
    int du;
    MPI_Win_shared_query(m->ctl_win, 0, &qs, &du, &base);
    if (m->rank == 0) {
        memset(base, 0, sizeof *base);
        base->spin_ns = spin_from_env();
    }
    MPI_Barrier(m->node);
    m->ctl = base;
#if DP_CAN_LEND
    pthread_t *t = malloc(sizeof *t);
    nb_set_guest_threads(1);
    ok = t && pthread_create(t, NULL, guest_main, m) == 0;
    if (!ok) free(t), t = NULL;
    m->guest = t;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, m->comm);
    if (!all_ok) lend_stop(m); /* some rank has no guest: nobody lends */
#endif
}

/* Stops this rank's guest and frees the page; collective. */
static void lend_stop(dp_comm *m) {
    if (!m->ctl) return;
#if DP_CAN_LEND
    atomic_store(&m->ctl->quit[m->rank], 1);
    atomic_store(&m->ctl->go[m->rank], 0);
    futex_wake(&m->ctl->go[m->rank]);
    if (m->guest) pthread_join(*(pthread_t *)m->guest, NULL);
    free(m->guest);
    m->guest = NULL;
    nb_set_guest_threads(0);
#endif
    MPI_Barrier(m->node);
    MPI_Win_free(&m->ctl_win);
    m->ctl = NULL;
}

/* Every rank of the host meets here: with lending, in the page (timed for
 * NB_MPI_STATS), where a rank that waits lends its core; otherwise through
 * MPI_Barrier on the host. 1 when MPI failed. */
static int host_barrier(dp_comm *m) {
#if DP_CAN_LEND
    if (m->ctl) {
        double t0 = now_s();
        lend_wait(m);
        m->waited_s += now_s() - t0;
        m->meets++;
        return 0;
    }
#endif
    return MPI_Barrier(m->node) != MPI_SUCCESS;
}

/* Before a collective whose MPI call synchronises anyway: with lending, the
 * ranks meet in the page first, so a rank that waits lends its core rather
 * than spin inside MPI. */
static void lend_arrive(dp_comm *m) {
    if (m->ctl) host_barrier(m);
}

int dp_init(int *argc, char ***argv, dp_comm *m) {
    int inited = 0;
    memset(m, 0, sizeof *m);
    MPI_Initialized(&inited);
    if (!inited && MPI_Init(argc, argv) != MPI_SUCCESS) return 1;
    m->comm = MPI_COMM_WORLD;
    m->node = MPI_COMM_NULL;
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &m->rank);
    MPI_Comm_size(m->comm, &m->size);
    return 0;
}

static void free_window(dp_comm *m) {
    if (!m->win_on) return;
    lend_stop(m);
    MPI_Win_unlock_all(m->win);
    MPI_Win_free(&m->win);
    free(m->slot), free(m->off), free(m->orig);
    m->slot = NULL, m->off = NULL, m->orig = NULL;
    m->shared = NULL;
    m->win_on = 0;
}

void dp_finalize(dp_comm *m) {
    free_window(m);
    if (m->node != MPI_COMM_NULL && m->node != 0) MPI_Comm_free(&m->node);
    free(m->send);
    free(m->recv);
    m->send = m->recv = NULL;
    m->cap = 0;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Finalize();
}

/* The buffer a list entry contributes: its values or its gradient (NULL when
 * it has none yet). */
static void *entry_buf(const nb_tensor *t, bool grads) { return grads ? t->grad : t->data; }

static int float_entry(const nb_tensor *t) { return t && (t->dtype == NB_F32 || t->dtype == NB_F64); }

int dp_bcast(dp_comm *m, const nb_tensor_list *l, bool grads) {
    for (int i = 0; i < l->n; i++) {
        nb_tensor *t = nb_list_tensor(l, i);
        void *p = entry_buf(t, grads);
        if (!p) return 1; /* every rank has the same layout, so all return here */
        /* Tensors larger than INT_MAX bytes go in pieces. */
        size_t bytes = t->numel * nb_dtype_size(t->dtype);
        for (size_t off = 0; off < bytes; off += (size_t)INT_MAX) {
            size_t len = bytes - off < (size_t)INT_MAX ? bytes - off : (size_t)INT_MAX;
            if (MPI_Bcast((char *)p + off, (int)len, MPI_BYTE, 0, m->comm) != MPI_SUCCESS) return 1;
        }
    }
    return 0;
}

/* A cursor over the concatenation of the list's float buffers. */
typedef struct cursor {
    const nb_tensor_list *l;
    bool grads;
    int i;      /* entry */
    size_t off; /* element within the entry */
} cursor;

static void cursor_skip(cursor *c) {
    while (c->i < c->l->n && (!float_entry(nb_list_tensor(c->l, c->i)) || c->off >= nb_list_tensor(c->l, c->i)->numel)) {
        c->i++;
        c->off = 0;
    }
}

/* Copies the next `len` elements into dst (as doubles; entries without a
 * gradient read as zeros), or writes src back when `store`. */
static void cursor_move(cursor *c, double *buf, size_t len, bool store) {
    size_t done = 0;
    while (done < len) {
        cursor_skip(c);
        nb_tensor *t = nb_list_tensor(c->l, c->i);
        size_t take = t->numel - c->off;
        if (take > len - done) take = len - done;
        void *p = entry_buf(t, c->grads);
        for (size_t k = 0; k < take; k++) {
            size_t e = c->off + k;
            if (t->dtype == NB_F64) {
                if (store && p) ((double *)p)[e] = buf[done + k];
                else if (!store) buf[done + k] = p ? ((double *)p)[e] : 0.0;
            } else {
                if (store && p) ((float *)p)[e] = (float)buf[done + k];
                else if (!store) buf[done + k] = p ? ((float *)p)[e] : 0.0;
            }
        }
        c->off += take;
        done += take;
    }
}

/* The next run of at most `want` elements of a float32 list at the cursor,
 * within one entry: its address (NULL for an entry without a gradient,
 * which reads as zeros and is not written) and length; the cursor moves
 * past it. */
static float *cursor_span(cursor *c, size_t want, size_t *got) {
    cursor_skip(c);
    nb_tensor *t = nb_list_tensor(c->l, c->i);
    size_t take = t->numel - c->off;
    if (take > want) take = want;
    float *p = entry_buf(t, c->grads);
    if (p) p += c->off;
    c->off += take;
    *got = take;
    return p;
}

/* cursor_move for a float32 list, float to float (store: buf into the
 * list; else the list into buf). */
static void cursor_move_f32(cursor *c, float *buf, size_t len, bool store) {
    for (size_t done = 0, got; done < len; done += got) {
        float *p = cursor_span(c, len - done, &got);
        if (store && p) memcpy(p, buf + done, got * sizeof(float));
        else if (!store && p) memcpy(buf + done, p, got * sizeof(float));
        else if (!store) memset(buf + done, 0, got * sizeof(float));
    }
}

/* The cursor moved `len` elements on without touching them. */
static void cursor_pass(cursor *c, size_t len) {
    for (size_t done = 0, got; done < len; done += got) (void)cursor_span(c, len - done, &got);
}

static int reserve(dp_comm *m, size_t doubles) {
    if (doubles <= m->cap) return 0;
    double *s = realloc(m->send, doubles * sizeof *s);
    if (!s) return 1;
    m->send = s;
    double *r = realloc(m->recv, doubles * sizeof *r);
    if (!r) return 1;
    m->recv = r;
    m->cap = doubles;
    return 0;
}

/* The rank-order mean of what every rank holds in in[s * chunk + k], for
 * k < chunk, in out. */
static void rank_order_mean(const dp_comm *m, const double *in, size_t chunk, double *out) {
    for (size_t k = 0; k < chunk; k++) {
        double acc = in[k];
        for (size_t s = 1; s < (size_t)m->size; s++) acc += in[s * chunk + k];
        out[k] = acc / (double)m->size;
    }
}

/* The float32 bucket, with the fewest copies: rank r sends each peer s the
 * peer's chunk s (copied out of the gradients), receives the peers' parts of
 * its own chunk r, and adds them and its own part (read in place) in rank
 * order, in double, divided by the rank count and rounded to float once,
 * writing the result into its gradients and a staging row; the rows go to
 * every peer, and each peer's is copied into the gradients. The values are
 * those of the general path (the float-double-float round trips there are
 * exact); no rank copies its own part through MPI. Point-to-point messages
 * of chunk floats, tag 0, one per peer each way and phase. */
static int exchange(dp_comm *m, float *sbuf, bool one_row, float *rbuf, size_t chunk) {
    int p = m->size, n = 0;
    MPI_Request req[2 * 64];
    MPI_Request *rq = p <= 64 ? req : malloc(sizeof *rq * 2 * (size_t)p);
    if (!rq) return 1;
    int rc = 0;
    for (int s = 0; s < p && !rc; s++) {
        if (s == m->rank) continue;
        rc |= MPI_Irecv(rbuf + (size_t)s * chunk, (int)chunk, MPI_FLOAT, s, 0, m->comm, &rq[n++]);
        const float *src = one_row ? sbuf + (size_t)m->rank * chunk : sbuf + (size_t)s * chunk;
        rc |= MPI_Isend(src, (int)chunk, MPI_FLOAT, s, 0, m->comm, &rq[n++]);
    }
    if (n) rc |= MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
    if (rq != req) free(rq);
    return rc != MPI_SUCCESS;
}

static int average_bucket_f32(dp_comm *m, cursor *rd, cursor *wr, size_t len) {
    size_t p = (size_t)m->size, r = (size_t)m->rank, chunk = (len + p - 1) / p;
    if (reserve(m, chunk * p)) return 1;
    float *fs = (float *)m->send, *fr = (float *)m->recv;
    /* the peers' chunks out of the gradients (zeros past the end) */
    cursor own = *rd;
    for (size_t s = 0; s < p; s++) {
        size_t lo = s * chunk < len ? s * chunk : len, hi = lo + chunk < len ? lo + chunk : len;
        if (s == r) {
            own = *rd;
            cursor_pass(rd, hi - lo);
        } else {
            cursor_move_f32(rd, fs + s * chunk, hi - lo, false);
        }
        memset(fs + s * chunk + (hi - lo), 0, (chunk - (hi - lo)) * sizeof(float));
    }
    if (exchange(m, fs, false, fr, chunk)) return 1;
    /* this rank's chunk: the rank-order mean, into the gradients and fs's row r */
    size_t lo = r * chunk < len ? r * chunk : len, hi = lo + chunk < len ? lo + chunk : len;
    float *mine = fs + r * chunk;
    const double n = (double)p;
    enum { BLOCK = 256 };
    double acc[BLOCK];
    for (size_t k = 0, got; k < hi - lo; k += got) {
        float *g = cursor_span(&own, hi - lo - k < BLOCK ? hi - lo - k : BLOCK, &got);
        for (size_t s = 0; s < p; s++) { /* rank order; plain loops that vectorise */
            const float *x = s == r ? g : fr + s * chunk + k;
            if (s == 0)
                for (size_t e = 0; e < got; e++) acc[e] = x ? x[e] : 0.0f;
            else if (x)
                for (size_t e = 0; e < got; e++) acc[e] += x[e];
            else
                for (size_t e = 0; e < got; e++) acc[e] += 0.0f;
        }
        for (size_t e = 0; e < got; e++) mine[k + e] = (float)(acc[e] / n);
        if (g) memcpy(g, mine + k, got * sizeof(float));
    }
    memset(mine + (hi - lo), 0, (chunk - (hi - lo)) * sizeof(float));
    if (exchange(m, fs, true, fr, chunk)) return 1;
    /* the peers' rows into the gradients */
    for (size_t s = 0; s < p; s++) {
        size_t a = s * chunk < len ? s * chunk : len, b = a + chunk < len ? a + chunk : len;
        if (s == r) cursor_pass(wr, b - a);
        else cursor_move_f32(wr, fr + s * chunk, b - a, true);
    }
    return 0;
}

/* One bucket of `len` elements. An all-float32 list: average_bucket_f32.
 * Otherwise doubles (float32 entries widened, exactly): reduce-scatter by
 * MPI_Alltoall, a sum in rank order, all-gather; the sums are the same
 * doubles either way, rounded once. */
static int average_bucket(dp_comm *m, cursor *rd, cursor *wr, size_t len, bool f32) {
    if (f32) return average_bucket_f32(m, rd, wr, len);
    size_t p = (size_t)m->size;
    size_t chunk = (len + p - 1) / p;
    if (reserve(m, chunk * p)) return 1;
    cursor_move(rd, m->send, len, false);
    memset(m->send + len, 0, (chunk * p - len) * sizeof(double));
    if (MPI_Alltoall(m->send, (int)chunk, MPI_DOUBLE, m->recv, (int)chunk, MPI_DOUBLE,
                     m->comm) != MPI_SUCCESS)
        return 1;
    /* recv holds rank s's part of this rank's chunk at s * chunk */
    double *mine = m->send; /* reused: the send data has gone */
    rank_order_mean(m, m->recv, chunk, mine);
    if (MPI_Allgather(mine, (int)chunk, MPI_DOUBLE, m->recv, (int)chunk, MPI_DOUBLE, m->comm) !=
        MPI_SUCCESS)
        return 1;
    cursor_move(wr, m->recv, len, true);
    return 0;
}

/* ---- one host: gradients in a shared window ------------------------------ */

/* Entry i's layout as every rank must agree on it, in one number. */
static uint64_t layout_hash(const nb_tensor_list *l) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < l->n; i++) {
        const nb_tensor *t = nb_list_tensor(l, i);
        uint64_t v[3] = {t ? t->numel : 0, t ? (uint64_t)t->dtype : 0, t && t->grad};
        for (int k = 0; k < 3; k++) h = (h ^ v[k]) * 1099511628211ull;
    }
    return h;
}

static bool shares(const nb_tensor *t) { return float_entry(t) && t->grad; }

/* Every rank on this host, with the same layout: the window applies. */
static int window_applies(dp_comm *m, const nb_tensor_list *l, int *yes) {
    *yes = 0;
    if (m->size == 1 || m->win_on) return 0;
    if (m->node == MPI_COMM_NULL &&
        MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &m->node) != MPI_SUCCESS)
        return 1;
    int nsize = 0;
    MPI_Comm_size(m->node, &nsize);
    unsigned long long h = layout_hash(l), lo = 0, hi = 0;
    if (MPI_Allreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, m->comm) != MPI_SUCCESS ||
        MPI_Allreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, m->comm) != MPI_SUCCESS)
        return 1;
    *yes = nsize == m->size && lo == hi;
    return 0;
}

int dp_share_grads(dp_comm *m, const nb_tensor_list *l) {
    int yes;
    if (window_applies(m, l, &yes)) return 1;
    if (!yes) return 0;
    size_t n = (size_t)l->n, bytes = 0;
    m->off = calloc(n ? n : 1, sizeof *m->off);
    m->orig = calloc(n ? n : 1, sizeof *m->orig);
    m->slot = calloc((size_t)m->size, sizeof *m->slot);
    int ok = m->off && m->orig && m->slot;
    for (size_t i = 0; ok && i < n; i++) {
        const nb_tensor *t = nb_list_tensor(l, (int)i);
        m->off[i] = bytes;
        if (shares(t)) bytes += (t->numel * nb_dtype_size(t->dtype) + 63) & ~(size_t)63;
    }
    /* all ranks must take the same branch from here: agree on ok */
    int all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, m->comm);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "alloc_shared_noncontig", "true"); /* each rank's slot on its own pages */
    char *mine = NULL;
    /* test seam (tests/mpi/test_mpi.sh): every rank's allocation "fails" */
    int rc = MPI_ERR_NO_MEM;
    if (all_ok && !getenv("NB_MPI_TEST_NOSHM"))
        rc = MPI_Win_allocate_shared((MPI_Aint)(bytes ? bytes : 64), 1, info, m->node, &mine,
                                     &m->win);
    MPI_Info_free(&info);
    /* The window is an optimisation: when any rank could not have it (a
     * small /dev/shm, a large model), every rank keeps the message path. A
     * rank whose part was allocated leaves it be (freeing is collective
     * over ranks some of which have no window) until MPI_Finalize. */
    int got = rc == MPI_SUCCESS, all_got = 0;
    if (MPI_Allreduce(&got, &all_got, 1, MPI_INT, MPI_MIN, m->comm) != MPI_SUCCESS) all_got = 0;
    if (!all_got) {
        free(m->off), free(m->orig), free(m->slot);
        m->off = NULL, m->orig = NULL, m->slot = NULL;
        m->shm_refused = 1;
        return all_ok ? 0 : 1;
    }
    m->win_on = 1;
    MPI_Win_lock_all(MPI_MODE_NOCHECK, m->win);
    for (int s = 0; s < m->size; s++) {
        MPI_Aint sz;
        int du;
        MPI_Win_shared_query(m->win, s, &sz, &du, &m->slot[s]);
    }
    for (size_t i = 0; i < n; i++) {
        nb_tensor *t = nb_list_tensor(l, (int)i);
        if (!shares(t)) continue;
        m->orig[i] = t->grad;
        memcpy(mine + m->off[i], t->grad, t->numel * nb_dtype_size(t->dtype));
        t->grad = mine + m->off[i];
    }
    m->shared = l;
    MPI_Win_sync(m->win);
    if (MPI_Barrier(m->node) != MPI_SUCCESS) return 1;
    lend_start(m);
    return 0;
}

void dp_unshare_grads(dp_comm *m) {
    if (!m->win_on) return;
    const nb_tensor_list *l = m->shared;
    for (int i = 0; i < l->n; i++) {
        nb_tensor *t = nb_list_tensor(l, i);
        if (!m->orig[i]) continue;
        memcpy(m->orig[i], t->grad, t->numel * nb_dtype_size(t->dtype));
        t->grad = m->orig[i];
    }
    free_window(m);
}

/* The list's gradients are where dp_share_grads put them. */
static bool in_window(const dp_comm *m, const nb_tensor_list *l) {
    if (!m->win_on || m->shared != l) return false;
    for (int i = 0; i < l->n; i++) {
        const nb_tensor *t = nb_list_tensor(l, i);
        if (m->orig[i] && t->grad != m->slot[m->rank] + m->off[i]) return false;
    }
    return true;
}

/* 1/size when it is exact (size a power of two): x * inv == x / size, and a
 * multiply costs less than a divide. 0 otherwise (divide). */
static double exact_inverse(int size) { return (size & (size - 1)) == 0 ? 1.0 / size : 0.0; }

/* Two ranks, float32: the mean of a and b, written into both, one pass. */
static void mean2_f32(float *restrict a, float *restrict b, size_t len) {
    for (size_t e = 0; e < len; e++) {
        float y = (float)(((double)a[e] + (double)b[e]) * 0.5);
        a[e] = y;
        b[e] = y;
    }
}

/* The generic mean over m->size copies at byte offset `off`, elements lo..hi,
 * in blocks: acc = copy 0 + copy 1 + ... (rank order, in double), times the
 * exact inverse or divided by the count, stored into every copy. */
#define SHM_MEAN(NAME, T)                                                                      \
    static void NAME(const dp_comm *m, size_t off, size_t lo, size_t hi) {                      \
        enum { BLOCK = 512 };                                                                  \
        double acc[BLOCK];                                                                     \
        const double n = (double)m->size, inv = exact_inverse(m->size);                       \
        for (size_t k = lo; k < hi; k += BLOCK) {                                              \
            size_t len = hi - k < BLOCK ? hi - k : BLOCK;                                      \
            const T *x0 = (const T *)(m->slot[0] + off) + k;                                   \
            for (size_t e = 0; e < len; e++) acc[e] = x0[e];                                   \
            for (int s = 1; s < m->size; s++) {                                                \
                const T *x = (const T *)(m->slot[s] + off) + k;                                \
                for (size_t e = 0; e < len; e++) acc[e] += x[e];                               \
            }                                                                                  \
            if (inv) for (size_t e = 0; e < len; e++) acc[e] *= inv;                           \
            else for (size_t e = 0; e < len; e++) acc[e] /= n;                                 \
            for (int s = 0; s < m->size; s++) {                                                \
                T *y = (T *)(m->slot[s] + off) + k;                                            \
                for (size_t e = 0; e < len; e++) y[e] = (T)acc[e];                             \
            }                                                                                  \
        }                                                                                      \
    }
SHM_MEAN(shm_mean_f32, float)
SHM_MEAN(shm_mean_f64, double)
#undef SHM_MEAN

/* Elements lo..hi of entry i (an f32 or f64 gradient in the window at byte
 * offset off): the rank-order mean of every rank's copy, written into every
 * copy. Two ranks of float32 (the common case) in one pass. */
static void shm_mean(const dp_comm *m, const nb_tensor *t, size_t off, size_t lo, size_t hi) {
    if (m->size == 2 && t->dtype == NB_F32)
        mean2_f32((float *)(m->slot[0] + off) + lo, (float *)(m->slot[1] + off) + lo, hi - lo);
    else if (t->dtype == NB_F32)
        shm_mean_f32(m, off, lo, hi);
    else
        shm_mean_f64(m, off, lo, hi);
}

/* Rank r takes the r-th 1/size of the elements, counted over the shared
 * entries in list order, between two barriers: before, every rank's
 * gradients are final; after, every mean is in every copy. (Two ranks may
 * write the two ends of one cache line at a cut: correct, and one line.) */
static int shm_average(dp_comm *m, const nb_tensor_list *l) {
    size_t total = 0;
    for (int i = 0; i < l->n; i++)
        if (m->orig[i]) total += nb_list_tensor(l, i)->numel;
    size_t p = (size_t)m->size, r = (size_t)m->rank;
    size_t lo = total * r / p, hi = total * (r + 1) / p;
    MPI_Win_sync(m->win);
    if (host_barrier(m)) return 1;
    MPI_Win_sync(m->win);
    size_t at = 0;
    for (int i = 0; i < l->n && at < hi; i++) {
        if (!m->orig[i]) continue;
        const nb_tensor *t = nb_list_tensor(l, i);
        size_t a = lo > at ? lo - at : 0, b = hi - at < t->numel ? hi - at : t->numel;
        if (a < b) shm_mean(m, t, m->off[i], a, b);
        at += t->numel;
    }
    MPI_Win_sync(m->win);
    if (MPI_Barrier(m->node) != MPI_SUCCESS) return 1;
    MPI_Win_sync(m->win);
    return 0;
}

int dp_average(dp_comm *m, const nb_tensor_list *l, bool grads) {
    size_t total = 0;
    bool f32 = true;
    for (int i = 0; i < l->n; i++)
        if (float_entry(nb_list_tensor(l, i))) {
            total += nb_list_tensor(l, i)->numel;
            f32 = f32 && nb_list_tensor(l, i)->dtype == NB_F32;
        }
    if (m->size == 1) return 0;
    if (grads && in_window(m, l)) return shm_average(m, l);
    size_t bucket = NB_MPI_BUCKET / sizeof(double);
    cursor rd = {l, grads, 0, 0}, wr = {l, grads, 0, 0};
    for (size_t at = 0; at < total; at += bucket) {
        size_t len = total - at < bucket ? total - at : bucket;
        if (average_bucket(m, &rd, &wr, len, f32)) return 1;
    }
    return 0;
}

uint64_t dp_hash(const nb_tensor_list *l) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < l->n; i++) {
        const nb_tensor *t = nb_list_tensor(l, i);
        if (!t || !t->data) continue;
        const unsigned char *p = t->data;
        size_t bytes = t->numel * nb_dtype_size(t->dtype);
        for (size_t k = 0; k < bytes; k++) {
            h ^= p[k];
            h *= 1099511628211ull;
        }
    }
    return h;
}

int dp_check_drift(dp_comm *m, const nb_tensor_list *l, char *msg, size_t n) {
    unsigned long long h = dp_hash(l), h0 = h;
    MPI_Bcast(&h0, 1, MPI_UNSIGNED_LONG_LONG, 0, m->comm);
    int differs = h != h0, any = 0;
    MPI_Allreduce(&differs, &any, 1, MPI_INT, MPI_MAX, m->comm);
    if (!any) return 0;
    int *all = calloc((size_t)m->size, sizeof *all);
    if (all) MPI_Allgather(&differs, 1, MPI_INT, all, 1, MPI_INT, m->comm);
    size_t w = (size_t)snprintf(msg, n, "parameters drifted: ranks");
    for (int r = 0; all && r < m->size && w < n; r++)
        if (all[r]) w += (size_t)snprintf(msg + w, n - w, " %d", r);
    if (w < n) snprintf(msg + w, n - w, " differ from rank 0 (hash %016llx)", h0);
    free(all);
    return 1;
}

#define AGREE_MSG 512

int dp_agree(dp_comm *m, int failed, char *msg, size_t n) {
    int mine = failed ? m->rank : INT_MAX, first = INT_MAX;
    lend_arrive(m);
    MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, m->comm);
    if (first == INT_MAX) return 0;
    char buf[AGREE_MSG] = {0};
    if (m->rank == first) snprintf(buf, sizeof buf, "%s", msg && msg[0] ? msg : "failed");
    MPI_Bcast(buf, AGREE_MSG, MPI_CHAR, first, m->comm);
    if (msg && n) snprintf(msg, n, "rank %d: %s", first, buf);
    return 1;
}
