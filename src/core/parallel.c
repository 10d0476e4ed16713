/* core/parallel.c - a small fixed pool of worker threads for the heavy kernels
 * (linear, matmul).
 *
 * nb_parallel_for splits [0, n) into one contiguous range per thread. Every
 * index is computed by exactly one thread with the same arithmetic in the
 * same order as with one thread, so results are bit-identical for any
 * thread count: kernels only split over independent outputs, never over a
 * sum. Work below `min_per_thread` items per thread runs inline, because for
 * tiny tensors waking threads costs more than it saves. */
#include "nb_internal.h"

#include <pthread.h>

#define NB_MAX_THREADS 64

typedef struct pool {
    pthread_mutex_t lock;
    pthread_cond_t start, done;
    pthread_t workers[NB_MAX_THREADS];
    int n_threads;       /* including the caller */
    unsigned generation; /* bumped for every job */
    int pending;         /* workers still running the current job */
    bool busy;           /* a job is running: a second caller runs inline */
    bool quit;
    /* the current job */
    nb_range_fn fn;
    void *arg;
    int64_t n;
} pool;

static pool the_pool = {
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .start = PTHREAD_COND_INITIALIZER,
    .done = PTHREAD_COND_INITIALIZER,
    .n_threads = 1,
};

static void range_of(int64_t n, int parts, int k, int64_t *begin, int64_t *end) {
    *begin = n * k / parts;
    *end = n * (k + 1) / parts;
}

static void *worker_main(void *p) {
    int k = (int)(intptr_t)p;
    pool *P = &the_pool;
    unsigned seen = 0;
    pthread_mutex_lock(&P->lock);
    for (;;) {
        while (!P->quit && P->generation == seen) pthread_cond_wait(&P->start, &P->lock);
        if (P->quit) break;
        seen = P->generation;
        nb_range_fn fn = P->fn;
        void *arg = P->arg;
        int64_t n = P->n, b, e;
        int parts = P->n_threads;
        pthread_mutex_unlock(&P->lock);
        range_of(n, parts, k, &b, &e);
        if (b < e) fn(arg, b, e);
        pthread_mutex_lock(&P->lock);
        if (--P->pending == 0) pthread_cond_signal(&P->done);
    }
    pthread_mutex_unlock(&P->lock);
    return NULL;
}

static void stop_workers(void) {
    pool *P = &the_pool;
    pthread_mutex_lock(&P->lock);
    P->quit = true;
    pthread_cond_broadcast(&P->start);
    pthread_mutex_unlock(&P->lock);
    for (int k = 1; k < P->n_threads; k++) pthread_join(P->workers[k], NULL);
    P->quit = false;
    P->n_threads = 1;
    /* New workers start waiting for generation 1: without this they would
     * take the last finished job (its arg long gone) for a new one. */
    P->generation = 0;
}

int nb_set_num_threads(int n) {
    if (n < 1) n = 1;
    if (n > NB_MAX_THREADS) n = NB_MAX_THREADS;
    pool *P = &the_pool;
    if (n == P->n_threads) return n;
    stop_workers();
    int started = 1;
    for (int k = 1; k < n; k++, started++)
        if (pthread_create(&P->workers[k], NULL, worker_main, (void *)(intptr_t)k) != 0) break;
    P->n_threads = started;
    return started;
}

int nb_get_num_threads(void) { return the_pool.n_threads; }

void nb_parallel_for(int64_t n, int64_t min_per_thread, nb_range_fn fn, void *arg) {
    pool *P = &the_pool;
    int parts = P->n_threads;
    if (min_per_thread < 1) min_per_thread = 1;
    if (parts == 1 || n < 2 * min_per_thread) {
        if (n > 0) fn(arg, 0, n);
        return;
    }
    pthread_mutex_lock(&P->lock);
    if (P->busy) { /* another thread of the caller's is using the pool */
        pthread_mutex_unlock(&P->lock);
        fn(arg, 0, n);
        return;
    }
    P->busy = true;
    P->fn = fn;
    P->arg = arg;
    P->n = n;
    P->pending = parts - 1;
    P->generation++;
    pthread_cond_broadcast(&P->start);
    pthread_mutex_unlock(&P->lock);
    int64_t b, e;
    range_of(n, parts, 0, &b, &e);
    if (b < e) fn(arg, b, e);
    pthread_mutex_lock(&P->lock);
    while (P->pending > 0) pthread_cond_wait(&P->done, &P->lock);
    P->busy = false;
    pthread_mutex_unlock(&P->lock);
}
