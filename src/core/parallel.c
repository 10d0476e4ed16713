/* core/parallel.c - a small persistent pool of worker threads for the heavy
 * kernels (matmul, linear, softmax, the elementwise ops, dropout, Adam).
 *
 * nb_parallel_for splits [0, n) into chunks that the caller and the workers
 * take in turn from a shared counter, so a thread slowed by other work on
 * the machine takes fewer. Every index is computed by exactly one thread
 * with the same arithmetic in the same order as with one thread, so results
 * are bit-identical for any thread count: kernels only split over
 * independent outputs, never over a sum. Work below `min_per_thread` items
 * per thread runs inline, because for tiny tensors waking threads costs
 * more than it saves.
 *
 * Dispatch costs microseconds: a job is published by a new generation in
 * an atomic ticket that idle workers poll for a while (some 10 us) before
 * they sleep on a condition variable; the caller takes chunks too, then
 * polls an atomic count of finished items. A worker that is not scheduled
 * in time just finds no chunk left. No thread is created per job. */
#include "nb_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NB_MAX_THREADS 64
#define POOL_SPIN 4000        /* polls before a waiting thread sleeps or yields */
#define POOL_CHUNKS_PER_THREAD 4

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* The job ticket: generation in the top 24 bits, the first index not yet
 * taken in the low 40. Taking a chunk is one compare-and-swap on it, which
 * fails once the job is over or replaced, so a worker that wakes late never
 * runs a chunk of a job it did not see start. */
#define TICKET_IDX_BITS 40
#define TICKET_IDX_MASK ((UINT64_C(1) << TICKET_IDX_BITS) - 1)
#define ticket_gen(t) ((unsigned)((t) >> TICKET_IDX_BITS))

typedef struct pool {
    pthread_mutex_t lock; /* guards sleeping and waking only */
    pthread_cond_t wake;
    pthread_t workers[NB_MAX_THREADS];
    int n_threads;                /* including the caller */
    _Atomic uint64_t ticket;
    atomic_llong done;            /* items of the current job finished */
    atomic_int sleepers;          /* workers waiting on `wake` */
    atomic_bool quit;
    atomic_flag busy;             /* a job is running: a second caller runs inline */
    /* the current job, stored before the ticket names it */
    _Atomic(nb_range_fn) fn;
    _Atomic(void *) arg;
    atomic_llong n, chunk;
} pool;

static pool the_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .wake = PTHREAD_COND_INITIALIZER,
    .n_threads = 1,
    .busy = ATOMIC_FLAG_INIT,
};

/* Takes chunks of job `gen` until none is left or the job is gone. */
static void run_chunks(pool *P, unsigned gen) {
    for (;;) {
        uint64_t t = atomic_load(&P->ticket);
        if (ticket_gen(t) != gen) return;
        int64_t b = (int64_t)(t & TICKET_IDX_MASK);
        int64_t n = atomic_load_explicit(&P->n, memory_order_relaxed);
        int64_t chunk = atomic_load_explicit(&P->chunk, memory_order_relaxed);
        nb_range_fn fn = atomic_load_explicit(&P->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&P->arg, memory_order_relaxed);
        if (b >= n) return;
        int64_t e = b + chunk < n ? b + chunk : n;
        /* success means job `gen` still runs (chunk b is not done), so the
         * fields read above are its own */
        if (!atomic_compare_exchange_weak(&P->ticket, &t, t + (uint64_t)(e - b))) continue;
        fn(arg, b, e);
        atomic_fetch_add(&P->done, e - b);
    }
}

/* Waits for a generation other than `seen` (or quit): spins first, then
 * sleeps. Returns the new generation. */
static unsigned wait_job(pool *P, unsigned seen) {
    for (int i = 0; i < POOL_SPIN; i++) {
        unsigned g = ticket_gen(atomic_load(&P->ticket));
        if (g != seen || atomic_load(&P->quit)) return g;
        cpu_relax();
    }
    pthread_mutex_lock(&P->lock);
    atomic_fetch_add(&P->sleepers, 1);
    unsigned g;
    while ((g = ticket_gen(atomic_load(&P->ticket))) == seen && !atomic_load(&P->quit))
        pthread_cond_wait(&P->wake, &P->lock);
    atomic_fetch_sub(&P->sleepers, 1);
    pthread_mutex_unlock(&P->lock);
    return g;
}

static void *worker_main(void *p) {
    pool *P = p;
    unsigned seen = 0;
    for (;;) {
        seen = wait_job(P, seen);
        if (atomic_load(&P->quit)) break;
        run_chunks(P, seen);
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
    atomic_store(&P->ticket, 0);
}

static bool env_read; /* NB_NUM_THREADS is looked at once, at first use */

static int set_threads(int n) {
    if (n < 1) n = 1;
    if (n > NB_MAX_THREADS) n = NB_MAX_THREADS;
    pool *P = &the_pool;
    if (n == P->n_threads) return n;
    stop_workers();
    int started = 1;
    for (int k = 1; k < n; k++, started++)
        if (pthread_create(&P->workers[k], NULL, worker_main, P) != 0) break;
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

void nb_parallel_for(int64_t n, int64_t min_per_thread, nb_range_fn fn, void *arg) {
    read_env();
    pool *P = &the_pool;
    int parts = P->n_threads;
    if (min_per_thread < 1) min_per_thread = 1;
    if (parts == 1 || n < 2 * min_per_thread || n > (int64_t)TICKET_IDX_MASK) {
        if (n > 0) fn(arg, 0, n);
        return;
    }
    if (atomic_flag_test_and_set(&P->busy)) { /* another thread of the caller's has it */
        fn(arg, 0, n);
        return;
    }
    int64_t chunk = (n + parts * POOL_CHUNKS_PER_THREAD - 1) / (parts * POOL_CHUNKS_PER_THREAD);
    if (chunk < min_per_thread) chunk = min_per_thread;
    atomic_store_explicit(&P->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&P->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&P->n, n, memory_order_relaxed);
    atomic_store_explicit(&P->chunk, chunk, memory_order_relaxed);
    atomic_store(&P->done, 0);
    unsigned gen = (ticket_gen(atomic_load(&P->ticket)) + 1) & 0xffffffu;
    if (gen == 0) gen = 1; /* 0 is the generation new workers have seen */
    atomic_store(&P->ticket, (uint64_t)gen << TICKET_IDX_BITS);
    if (atomic_load(&P->sleepers) > 0) {
        pthread_mutex_lock(&P->lock);
        pthread_cond_broadcast(&P->wake);
        pthread_mutex_unlock(&P->lock);
    }
    run_chunks(P, gen);
    for (long spins = 0; atomic_load(&P->done) < n; spins++) {
        if (spins < POOL_SPIN) cpu_relax();
        else sched_yield();
    }
    atomic_flag_clear(&P->busy);
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
