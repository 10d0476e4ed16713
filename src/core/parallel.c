/* core/parallel.c - a small persistent pool of worker threads for the heavy
 * kernels (matmul, linear, softmax, the elementwise ops, dropout, Adam).
 *
 * nb_parallel_for gives each thread a share of [0, n), which it takes in
 * chunks, then helps the others with theirs, so a thread slowed by other
 * work on the machine does less (see `share` below). Every index is
 * computed by exactly one thread with the same arithmetic in the same order
 * as with one thread, so results are bit-identical for any thread count:
 * kernels only split over independent outputs, never over a sum. Work below
 * `min_per_thread` items per thread runs inline, because for tiny tensors
 * waking threads costs more than it saves.
 *
 * Dispatch costs microseconds: a job is published by a new generation in
 * an atomic ticket that idle workers poll for a while (some 10 us) before
 * they sleep on a condition variable; the caller runs its share too, then
 * polls an atomic count of finished items. A worker that is not scheduled
 * in time just finds no chunk left. No thread is created per job.
 *
 * Guests (nb_set_guest_threads) are threads the pool does not own: a job
 * gets a share for each, which the pool's threads help with like any other,
 * and a guest thread in nb_guest_serve works like a worker while its flag
 * holds (tools/mpi/dp.c's lent cores). Sharing out is the same for any mix of
 * threads, so the bits are too. */
#include "core/core_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NB_MAX_THREADS 64
#define POOL_SPIN 4000        /* polls before a waiting thread sleeps or yields */
#define POOL_MIN_CHUNKS_PER_SHARE 16


/* A ticket: generation in the top 24 bits, an index in the low 40. The
 * pool's `job` ticket announces a job (its index unused); each thread's
 * `home` ticket holds the first index not yet taken of that thread's share
 * of it. Taking a chunk is one compare-and-swap on a home ticket, which
 * fails once the job is over or replaced, so a worker that wakes late never
 * runs a chunk of a job it did not see start. */
#define TICKET_IDX_BITS 40
#define TICKET_IDX_MASK ((UINT64_C(1) << TICKET_IDX_BITS) - 1)
#define ticket_gen(t) ((unsigned)((t) >> TICKET_IDX_BITS))

/* Thread k's share of a job: indices [k n / parts, (k + 1) n / parts). It
 * takes its own share front to back, a chunk at a time, then helps the
 * others with theirs. So with threads running alike the caller computes
 * the first part of every job and a worker the same later part, and data
 * one op wrote stays in the cache of the thread the next op reads it on
 * (a residual add after a linear, layer_norm after the add); a thread held
 * up by other work on the machine has its share taken by the others. Each
 * share's ticket has a cache line to itself: a thread taking its own
 * chunks touches no line another thread is using. */
typedef struct share {
    _Alignas(64) _Atomic uint64_t ticket;
    atomic_llong end;
} share;

typedef struct pool {
    pthread_mutex_t lock; /* guards sleeping and waking only */
    pthread_cond_t wake;
    pthread_t workers[NB_MAX_THREADS];
    int n_threads;                /* including the caller */
    int guests;                   /* guest shares (nb_set_guest_threads) */
    _Atomic uint64_t job;         /* generation of the current job */
    atomic_llong done;            /* items of the current job finished */
    atomic_int sleepers;          /* workers waiting on `wake` */
    atomic_bool quit;
    atomic_flag busy;             /* a job is running: a second caller runs inline */
    /* the current job, stored before the job ticket names it: its tasks,
     * task t covering indices [off[t], off[t + 1]) of the job */
    _Atomic(nb_range_fn) fn[NB_MAX_TASKS];
    _Atomic(void *) arg[NB_MAX_TASKS];
    atomic_llong off[NB_MAX_TASKS + 1];
    atomic_int n_tasks;
    atomic_llong chunk;
    atomic_int parts;
    share home[NB_MAX_THREADS];
} pool;

static pool the_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .n_threads = 1,
    .busy = ATOMIC_FLAG_INIT,
};

/* Takes one chunk of share s of job `gen` and runs it; returns the items
 * run, 0 when the share is used up or the job is gone. The chunk is half of
 * what is left of the share, but not under the job's smallest chunk, so a
 * share goes in a few chunks and a helper takes half of what remains. */
static int64_t take_chunk(pool *P, share *s, unsigned gen) {
    for (;;) {
        uint64_t t = atomic_load(&s->ticket);
        if (ticket_gen(t) != gen) return 0;
        int64_t b = (int64_t)(t & TICKET_IDX_MASK);
        int64_t end = atomic_load(&s->end);
        if (b >= end) return 0;
        int64_t chunk = atomic_load(&P->chunk);
        int64_t half = (end - b) / 2;
        if (half > chunk) chunk = half;
        int64_t e = b + chunk < end ? b + chunk : end;
        /* success means job `gen` still runs (this chunk is not done), so
         * the fields read above are its own: a new job closes every share
         * before it writes them */
        if (!atomic_compare_exchange_weak(&s->ticket, &t, t + (uint64_t)(e - b))) continue;
        int nt = atomic_load(&P->n_tasks);
        for (int k = 0; k < nt; k++) { /* the tasks [b, e) meets, each in its own indices */
            int64_t lo = atomic_load(&P->off[k]), hi = atomic_load(&P->off[k + 1]);
            int64_t l = b > lo ? b : lo, h = e < hi ? e : hi;
            if (l < h) atomic_load(&P->fn[k])(atomic_load(&P->arg[k]), l - lo, h - lo);
        }
        return e - b;
    }
}

/* Thread `self` runs its share of job `gen`, then helps with the others',
 * and counts what it ran into `done` once. A guest passes its flag `go`
 * and stops taking chunks when it clears; the pool's threads pass NULL. */
static void run_job(pool *P, int self, unsigned gen, const _Atomic int *go) {
    int parts = atomic_load(&P->parts);
    if (self >= parts) return;
    int64_t ran = 0, r;
    for (int k = 0; k < parts && (!go || atomic_load(go)); k++) {
        share *s = &P->home[(self + k) % parts];
        while ((!go || atomic_load(go)) && (r = take_chunk(P, s, gen)) > 0) ran += r;
    }
    if (ran) atomic_fetch_add(&P->done, ran);
}

/* Waits for a generation other than `seen` (or quit): spins first, then
 * sleeps. Returns the new generation. */
static unsigned wait_job(pool *P, unsigned seen) {
    for (int i = 0; i < POOL_SPIN; i++) {
        unsigned g = ticket_gen(atomic_load(&P->job));
        if (g != seen || atomic_load(&P->quit)) return g;
        NB_CPU_RELAX();
    }
    pthread_mutex_lock(&P->lock);
    atomic_fetch_add(&P->sleepers, 1);
    unsigned g;
    while ((g = ticket_gen(atomic_load(&P->job))) == seen && !atomic_load(&P->quit))
        pthread_cond_wait(&P->wake, &P->lock);
    atomic_fetch_sub(&P->sleepers, 1);
    pthread_mutex_unlock(&P->lock);
    return g;
}

static int worker_index[NB_MAX_THREADS]; /* worker k's argument: k */

static void *worker_main(void *p) {
    pool *P = &the_pool;
    int self = *(int *)p;
    unsigned seen = 0;
    for (;;) {
        seen = wait_job(P, seen);
        if (atomic_load(&P->quit)) break;
        run_job(P, self, seen, NULL);
    }
    return NULL;
}

static void stop_workers(void) {
    pool *P = &the_pool;
    pthread_mutex_lock(&P->lock);
    atomic_store(&P->quit, true);
    pthread_cond_broadcast(&P->wake);
    pthread_mutex_unlock(&P->lock);
    for (int k = 1; k < P->n_threads; k++) pthread_join(P->workers[k], NULL);
    atomic_store(&P->quit, false);
    P->n_threads = 1;
    /* New workers wait for a generation after 0. */
    atomic_store(&P->job, 0);
}

static bool env_read; /* NB_NUM_THREADS is looked at once, at first use */

static int set_threads(int n) {
    if (n < 1) n = 1;
    if (n > NB_MAX_THREADS) n = NB_MAX_THREADS;
    pool *P = &the_pool;
    if (n == P->n_threads) return n;
    stop_workers();
    int started = 1;
    for (int k = 1; k < n; k++, started++) {
        worker_index[k] = k;
        if (pthread_create(&P->workers[k], NULL, worker_main, &worker_index[k]) != 0) break;
    }
    P->n_threads = started;
    return started;
}

/* The first use without an explicit count takes NB_NUM_THREADS (1 when
 * unset or not a number from 1 to NB_MAX_THREADS). */
static void read_env(void) {
    if (env_read) return;
    env_read = true;
    const char *s = getenv("NB_NUM_THREADS");
    if (!s || !*s) return;
    char *end;
    long v = strtol(s, &end, 10);
    if (!*end && v >= 1 && v <= NB_MAX_THREADS) set_threads((int)v);
}

int nb_set_num_threads(int n) {
    env_read = true;
    return set_threads(n);
}

int nb_get_num_threads(void) {
    read_env();
    return the_pool.n_threads;
}

int nb_parallel_parts(void) {
    read_env();
    int parts = the_pool.n_threads + the_pool.guests;
    return parts < NB_MAX_THREADS ? parts : NB_MAX_THREADS;
}

int nb_set_guest_threads(int n) {
    if (n < 0) n = 0;
    if (n > NB_MAX_THREADS - the_pool.n_threads) n = NB_MAX_THREADS - the_pool.n_threads;
    the_pool.guests = n;
    return n;
}

void nb_guest_serve(int slot, const nb_atomic_int *go) {
    pool *P = &the_pool;
    if (!go || slot < 0 || slot >= P->guests) return;
    int self = P->n_threads + slot;
    unsigned seen = 0; /* no job has generation 0: join the current one */
    while (atomic_load(go)) {
        unsigned g = ticket_gen(atomic_load(&P->job));
        if (g != seen) {
            seen = g;
            run_job(P, self, g, go);
        } else {
            NB_CPU_RELAX();
        }
    }
}

/* Where thread k's share of the job starts: the index where the work
 * before it (items weighted by their task's cost) is k / parts of all. */
static int64_t share_start(const nb_task *t, int nt, int k, int parts, double total) {
    double want = total * k / parts, before = 0;
    int64_t off = 0;
    for (int i = 0; i < nt; i++) {
        double w = (double)t[i].n * t[i].cost;
        if (before + w >= want) {
            int64_t j = t[i].cost > 0 ? (int64_t)((want - before) / t[i].cost) : 0;
            return off + (j < t[i].n ? j : t[i].n);
        }
        before += w, off += t[i].n;
    }
    return off;
}

/* The tasks on the calling thread, in order. */
static void run_inline(const nb_task *t, int nt) {
    for (int i = 0; i < nt; i++)
        if (t[i].n > 0) t[i].fn(t[i].arg, 0, t[i].n);
}

/* One job of nt loops in `parts` shares (see nb_parallel_tasks): n items
 * in all, `total` their work. */
static void run_tasks(const nb_task *t, int nt, int64_t n, double total, int64_t min_chunk,
                      int parts) {
    pool *P = &the_pool;
    if (parts == 1 || nt > NB_MAX_TASKS || n > (int64_t)TICKET_IDX_MASK ||
        atomic_flag_test_and_set(&P->busy)) { /* (busy: another thread of the caller's has it) */
        run_inline(t, nt);
        return;
    }
    unsigned gen = (ticket_gen(atomic_load(&P->job)) + 1) & 0xffffffu;
    if (gen == 0) gen = 1; /* 0 is the generation new workers have seen */
    uint64_t g = (uint64_t)gen << TICKET_IDX_BITS;
    /* close every share first (a late helper of the last job then fails its
     * compare-and-swap rather than read this job's bounds), then the job.
     * (Sequentially consistent stores and loads: a helper that reads one of
     * these after the close cannot then succeed in its compare-and-swap.) */
    for (int k = 0; k < parts; k++) atomic_store(&P->home[k].ticket, g | TICKET_IDX_MASK);
    int64_t off = 0;
    for (int i = 0; i < nt; i++) {
        atomic_store(&P->fn[i], t[i].fn);
        atomic_store(&P->arg[i], t[i].arg);
        atomic_store(&P->off[i], off);
        off += t[i].n;
    }
    atomic_store(&P->off[nt], off);
    atomic_store(&P->n_tasks, nt);
    atomic_store(&P->chunk, min_chunk < 1 ? 1 : min_chunk);
    atomic_store(&P->parts, parts);
    atomic_store(&P->done, 0);
    int64_t start = 0;
    for (int k = 0; k < parts; k++) {
        int64_t end = k + 1 < parts ? share_start(t, nt, k + 1, parts, total) : n;
        if (end < start) end = start;
        atomic_store(&P->home[k].end, end);
        atomic_store(&P->home[k].ticket, g | (uint64_t)start);
        start = end;
    }
    atomic_store(&P->job, g);
    if (atomic_load(&P->sleepers) > 0) {
        pthread_mutex_lock(&P->lock);
        pthread_cond_broadcast(&P->wake);
        pthread_mutex_unlock(&P->lock);
    }
    run_job(P, 0, gen, NULL);
    for (long spins = 0; atomic_load(&P->done) < n; spins++) {
        if (spins < POOL_SPIN) NB_CPU_RELAX();
        else sched_yield();
    }
    atomic_flag_clear(&P->busy);
}

void nb_parallel_tasks(const nb_task *t, int n_tasks, double min_cost) {
    double total = 0, cheapest = 0;
    int64_t n = 0;
    for (int i = 0; i < n_tasks; i++) {
        total += (double)t[i].n * t[i].cost, n += t[i].n;
        if (t[i].n > 0 && (cheapest == 0 || t[i].cost < cheapest)) cheapest = t[i].cost;
    }
    int parts = nb_parallel_parts();
    if (parts == 1 || total < 2 * min_cost) {
        run_inline(t, n_tasks);
        return;
    }
    /* the smallest chunk: the cheapest task's items worth a sixteenth of a
     * share */
    int64_t chunk = cheapest > 0 ? (int64_t)(total / parts / POOL_MIN_CHUNKS_PER_SHARE
                                             / cheapest)
                                 : 1;
    run_tasks(t, n_tasks, n, total, chunk < n ? chunk : n, parts);
}

void nb_parallel_for(int64_t n, int64_t min_per_thread, nb_range_fn fn, void *arg) {
    int parts = nb_parallel_parts();
    if (min_per_thread < 1) min_per_thread = 1;
    if (parts == 1 || n < 2 * min_per_thread) {
        if (n > 0) fn(arg, 0, n);
        return;
    }
    /* the smallest chunk: a sixteenth of a share, or a quarter of the
     * caller's minimum */
    int64_t chunk = n / (parts * POOL_MIN_CHUNKS_PER_SHARE);
    if (chunk < (min_per_thread + 3) / 4) chunk = (min_per_thread + 3) / 4;
    nb_task t = {fn, arg, n, 1.0};
    run_tasks(&t, 1, n, (double)n, chunk, parts);
}

/* ---- a parallel copy, for gradients copied whole on the way back ---------- */
typedef struct copy_job {
    void *dst;
    const void *src;
} copy_job;

static void copy_range(void *arg, int64_t lo, int64_t hi) {
    const copy_job *j = arg;
    memcpy((char *)j->dst + lo, (const char *)j->src + lo, (size_t)(hi - lo));
}

void nb_copy_par(void *dst, const void *src, size_t bytes) {
    copy_job j = {dst, src};
    nb_parallel_for((int64_t)bytes, 1 << 16, copy_range, &j); /* 64 KB a thread */
}
