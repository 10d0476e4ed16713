/* check_threads.c - results do not depend on the thread count.
 *
 * linear, matmul and a MultiHeadAttention forward + backward (dropout on)
 * run with 1, 2 and 3 worker threads must give memcmp-identical outputs and
 * gradients. The sizes are odd and large enough that linear's kernels split
 * (it splits at about 512k multiply-adds per thread), so the threads get row
 * and output ranges that are not multiples of the kernel's tile sizes.
 * Every test ends with nb_set_num_threads(1), which joins the workers (the
 * suite runs clean under `make memcheck`). */
#include "check_nabla.h"

#include <pthread.h>
#include <stdatomic.h>

#include "core/core_internal.h" /* nb_parallel_for */

static const int thread_counts[] = {1, 2, 3};
#define N_COUNTS ((int)(sizeof thread_counts / sizeof thread_counts[0]))

/* The bytes of an output and a list of gradients, concatenated. */
typedef struct snapshot {
    unsigned char *bytes;
    size_t len;
} snapshot;

static void snap_add(snapshot *s, const void *p, size_t n) {
    s->bytes = realloc(s->bytes, s->len + n);
    ck_assert_ptr_nonnull(s->bytes);
    memcpy(s->bytes + s->len, p, n);
    s->len += n;
}

static size_t bytes_of(const nb_tensor *t) { return t->numel * nb_dtype_size(t->dtype); }

/* out's data, then the gradient of each of the n leaves (all must have one). */
static snapshot take(const nb_tensor *out, nb_tensor *const *leaves, int n) {
    snapshot s = {NULL, 0};
    snap_add(&s, out->data, bytes_of(out));
    for (int i = 0; i < n; i++) {
        ck_assert_msg(leaves[i]->grad != NULL, "leaf %d has no gradient", i);
        snap_add(&s, leaves[i]->grad, bytes_of(leaves[i]));
    }
    return s;
}

/* Every snapshot equals the first (one thread) bit for bit. */
static void assert_identical(const snapshot *s, const char *what) {
    for (int k = 1; k < N_COUNTS; k++) {
        ck_assert_uint_eq(s[k].len, s[0].len);
        ck_assert_msg(memcmp(s[k].bytes, s[0].bytes, s[0].len) == 0,
                      "%s: %d threads differ from 1 thread", what, thread_counts[k]);
    }
    for (int k = 0; k < N_COUNTS; k++) free(s[k].bytes);
}

static void use_threads(int n) {
    ck_assert_int_eq(nb_set_num_threads(n), n);
    ck_assert_int_eq(nb_get_num_threads(), n);
}

static nb_tensor *rand_leaf(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape,
                            uint64_t seed) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, seed, 11);
    return nb_requires_grad(nb_uniform(ctx, dt, ndim, shape, -1.0, 1.0, &rng));
}

/* ---- linear ------------------------------------------------------------------------ */

/* x (5, 97, 67) -> (5, 97, 45): 485 rows, split 242/243 and 161/162/162,
 * and 45 outputs for the weight gradients, split 22/23 and 15/15/15. With and
 * without bias, f32 and f64. The one-thread result is also checked against
 * a plain double loop. */
START_TEST(test_linear_same_bits_any_thread_count) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        for (int with_b = 0; with_b <= 1; with_b++) {
            nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
            nb_tensor *x = rand_leaf(params, dt, NB_SHAPE(5, 97, 67), 1);
            nb_tensor *w = rand_leaf(params, dt, NB_SHAPE(45, 67), 2);
            nb_tensor *b = rand_leaf(params, dt, NB_SHAPE(45), 3);
            nb_tensor *g = rand_leaf(params, dt, NB_SHAPE(5, 97, 45), 4);
            nb_tensor *leaves[3] = {x, w, b};
            snapshot s[N_COUNTS];
            for (int k = 0; k < N_COUNTS; k++) {
                use_threads(thread_counts[k]);
                nb_ctx_reset(step);
                for (int i = 0; i < 3; i++) nb_zero_grad(leaves[i]);
                nb_tensor *y = nb_linear(step, x, w, with_b ? b : NULL);
                ck_assert_int_eq(nb_backward(step, y, g), NB_OK);
                s[k] = take(y, leaves, with_b ? 3 : 2);
                if (k == 0) {
                    double tol = dt == NB_F32 ? 1e-4 : 1e-12;
                    for (size_t r = 0; r < 485; r += 12)
                        for (size_t o = 0; o < 45; o += 4) {
                            double want = with_b ? nb_get(b, o) : 0;
                            for (size_t i = 0; i < 67; i++)
                                want += nb_get(x, r * 67 + i) * nb_get(w, o * 67 + i);
                            ck_assert_double_eq_tol(nb_get(y, r * 45 + o), want, tol);
                        }
                }
            }
            assert_identical(s, with_b ? "linear with bias" : "linear");
            nb_ctx_free(step);
            nb_ctx_free(params);
        }
    }
    use_threads(1);
}
END_TEST

/* x (37, 300) -> 600 outputs, float32, over two 512-column panels (the
 * second 88 wide) and two 256-deep blocks of the inner dimension. The
 * forward (600 columns, 37 rows) is split over the threads by bands of
 * columns, each packing its own part of w; the gradients (inner dimension
 * the 37 rows, or 600) by rows, b packed once and shared
 * (nb_gemm_float_par). The one-thread result is checked against a plain
 * double loop. */
START_TEST(test_linear_wide_same_bits_any_thread_count) {
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_tensor *x = rand_leaf(params, NB_F32, NB_SHAPE(37, 300), 11);
    nb_tensor *w = rand_leaf(params, NB_F32, NB_SHAPE(600, 300), 12);
    nb_tensor *g = rand_leaf(params, NB_F32, NB_SHAPE(37, 600), 13);
    nb_tensor *leaves[2] = {x, w};
    snapshot s[N_COUNTS];
    for (int k = 0; k < N_COUNTS; k++) {
        use_threads(thread_counts[k]);
        nb_ctx_reset(step);
        for (int i = 0; i < 2; i++) nb_zero_grad(leaves[i]);
        nb_tensor *y = nb_linear(step, x, w, NULL);
        ck_assert_int_eq(nb_backward(step, y, g), NB_OK);
        s[k] = take(y, leaves, 2);
        if (k > 0) continue;
        for (size_t r = 0; r < 37; r += 5)
            for (size_t o = 0; o < 600; o += 7) {
                double want = 0;
                for (size_t i = 0; i < 300; i++)
                    want += nb_get(x, r * 300 + i) * nb_get(w, o * 300 + i);
                ck_assert_double_eq_tol(nb_get(y, r * 600 + o), want, 1e-4);
            }
        for (size_t o = 0; o < 600; o += 11) /* dw = g^T x */
            for (size_t i = 0; i < 300; i += 13) {
                double want = 0;
                for (size_t r = 0; r < 37; r++)
                    want += nb_get(g, r * 600 + o) * nb_get(x, r * 300 + i);
                ck_assert_double_eq_tol(((float *)w->grad)[o * 300 + i], want, 1e-4);
            }
    }
    assert_identical(s, "wide linear");
    nb_ctx_free(step);
    nb_ctx_free(params);
    use_threads(1);
}
END_TEST

/* ---- matmul ------------------------------------------------------------------------ */

/* (5, 3, 29, 37) @ (3, 37, 31): a broadcast batch dim, odd matrix sizes. */
START_TEST(test_matmul_same_bits_any_thread_count) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
        nb_tensor *a = rand_leaf(params, dt, NB_SHAPE(5, 3, 29, 37), 5);
        nb_tensor *b = rand_leaf(params, dt, NB_SHAPE(3, 37, 31), 6);
        nb_tensor *g = rand_leaf(params, dt, NB_SHAPE(5, 3, 29, 31), 7);
        nb_tensor *leaves[2] = {a, b};
        snapshot s[N_COUNTS];
        for (int k = 0; k < N_COUNTS; k++) {
            use_threads(thread_counts[k]);
            nb_ctx_reset(step);
            nb_zero_grad(a);
            nb_zero_grad(b);
            nb_tensor *c = nb_matmul(step, a, b);
            ck_assert_int_eq(nb_backward(step, c, g), NB_OK);
            s[k] = take(c, leaves, 2);
        }
        assert_identical(s, "matmul");
        nb_ctx_free(step);
        nb_ctx_free(params);
    }
    use_threads(1);
}
END_TEST

/* ---- MultiHeadAttention ------------------------------------------------------------ */

/* MultiHeadAttention(d_in 45, d_out 63, context 23, dropout 0.1, 7 heads of
 * 9, qkv_bias) on x (17, 23, 45) (391 rows), training: the output and the gradients of
 * x and of all 8 parameters. Dropout draws from a stream seeded afresh for
 * each thread count. */
START_TEST(test_mha_same_bits_any_thread_count) {
    for (int dt = NB_F32; dt <= NB_F64; dt++) {
        nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
        nb_pcg32 init, drop;
        nb_pcg32_seed(&init, 123, 1);
        nb_nn_mha m;
        ck_assert_int_eq(nb_nn_mha_init(params, &m, 45, 63, 23, 0.1, 7, true, dt, &init), NB_OK);
        ck_assert_int_eq(m.params.n, 8);
        nb_tensor *x = rand_leaf(params, dt, NB_SHAPE(17, 23, 45), 8);
        nb_tensor *g = rand_leaf(params, dt, NB_SHAPE(17, 23, 63), 9);
        nb_tensor *leaves[9];
        leaves[0] = x;
        for (int i = 0; i < m.params.n; i++) leaves[1 + i] = m.params.t[i];
        snapshot s[N_COUNTS];
        for (int k = 0; k < N_COUNTS; k++) {
            use_threads(thread_counts[k]);
            nb_ctx_reset(step);
            nb_pcg32_seed(&drop, 77, 3);
            m.dropout.rng = &drop;
            nb_params_zero_grad(&m.params);
            nb_zero_grad(x);
            nb_tensor *y = nb_nn_mha_forward(step, &m, x);
            ck_assert_ptr_nonnull(y);
            ck_assert_int_eq(nb_backward(step, y, g), NB_OK);
            s[k] = take(y, leaves, 9);
        }
        assert_identical(s, "MultiHeadAttention");
        nb_ctx_free(step);
        nb_ctx_free(params);
    }
    use_threads(1);
}
END_TEST

/* ---- the pool ---------------------------------------------------------------------- */

/* Growing and shrinking the pool; back at one thread the workers are joined
 * and ops run on the caller. Out-of-range requests are clamped. */
START_TEST(test_pool_resize_and_join) {
    use_threads(3);
    use_threads(2);
    use_threads(3);
    use_threads(1);
    ck_assert_int_eq(nb_set_num_threads(0), 1);
    ck_assert_int_eq(nb_set_num_threads(-5), 1);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(4, 3));
    nb_tensor *w = nb_full(ctx, NB_F32, NB_SHAPE(2, 3), 0.5);
    nb_tensor *y = nb_linear(ctx, x, w, NULL);
    ck_assert_tensor_near(y, ((double[]){1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5, 1.5}), 8, 0);
    nb_ctx_free(ctx);
    ck_assert_int_eq(nb_get_num_threads(), 1);
}
END_TEST

/* ---- guest threads ---------------------------------------------------------------- */

typedef struct guest_arg {
    _Atomic int go;
    pthread_t self;
} guest_arg;

static void *guest_thread(void *p) {
    guest_arg *g = p;
    nb_guest_serve(0, &g->go);
    return NULL;
}

typedef struct mark_job {
    _Atomic int *count;       /* per index: how many times it ran */
    _Atomic int by_guest;     /* indices the guest ran */
    pthread_t guest;
} mark_job;

static void mark_range(void *arg, int64_t lo, int64_t hi) {
    mark_job *j = arg;
    bool guest = pthread_equal(pthread_self(), j->guest);
    for (int64_t i = lo; i < hi; i++) {
        atomic_fetch_add(&j->count[i], 1);
        if (guest) atomic_fetch_add(&j->by_guest, 1);
    }
}

/* A thread of the test's own joins the one-thread pool's jobs as a guest
 * (what dp_comm's lent cores do): every index still runs exactly once, the
 * guest takes some of them, and a linear forward + backward keeps its bits.
 * With no guest present, jobs split for one are run by the caller alone. */
START_TEST(test_guest_threads) {
    use_threads(1);
    ck_assert_int_eq(nb_set_guest_threads(-2), 0);
    guest_arg idle = {.go = 1};
    nb_guest_serve(0, &idle.go); /* no guest slots: returns at once */
    ck_assert_int_eq(nb_set_guest_threads(1), 1);
    idle.go = 0;
    nb_guest_serve(0, &idle.go); /* go already 0: returns at once */
    nb_guest_serve(1, NULL);

    enum { N = 1 << 14 };
    static _Atomic int count[N];
    mark_job j = {.count = count};
    for (int rep = 0; rep < 3; rep++) nb_parallel_for(N, 64, mark_range, &j); /* no guest */
    for (int i = 0; i < N; i++) ck_assert_int_eq(count[i], 3);
    ck_assert_int_eq(j.by_guest, 0);

    /* the linear of test_linear_same_bits_any_thread_count, f32 */
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_tensor *x = rand_leaf(params, NB_F32, NB_SHAPE(5, 97, 67), 1);
    nb_tensor *w = rand_leaf(params, NB_F32, NB_SHAPE(45, 67), 2);
    nb_tensor *g = rand_leaf(params, NB_F32, NB_SHAPE(5, 97, 45), 4);
    nb_tensor *leaves[2] = {x, w};
    snapshot s[N_COUNTS] = {0};
    for (int k = 0; k < 2; k++) {
        guest_arg ga = {.go = k};
        if (k) ck_assert_int_eq(pthread_create(&ga.self, NULL, guest_thread, &ga), 0);
        j.guest = ga.self;
        if (k) /* until the guest has taken part (it starts when the OS runs it) */
            for (int rep = 0; rep < 100000 && atomic_load(&j.by_guest) == 0; rep++)
                nb_parallel_for(N, 64, mark_range, &j);
        nb_ctx_reset(step);
        for (int i = 0; i < 2; i++) nb_zero_grad(leaves[i]);
        nb_tensor *y = nb_linear(step, x, w, NULL);
        ck_assert_int_eq(nb_backward(step, y, g), NB_OK);
        s[k] = take(y, leaves, 2);
        if (k) {
            atomic_store(&ga.go, 0);
            ck_assert_int_eq(pthread_join(ga.self, NULL), 0);
        }
    }
    ck_assert_msg(j.by_guest > 0, "the guest never ran a chunk");
    int jobs = count[0];
    ck_assert_int_gt(jobs, 3);
    for (int i = 0; i < N; i++) ck_assert_int_eq(count[i], jobs); /* once per job */
    ck_assert_uint_eq(s[1].len, s[0].len);
    ck_assert(memcmp(s[0].bytes, s[1].bytes, s[0].len) == 0);
    free(s[0].bytes), free(s[1].bytes);
    nb_ctx_free(step);
    nb_ctx_free(params);
    nb_set_guest_threads(0);
}
END_TEST

Suite *suite_threads(void) {
    Suite *s = suite_create("threads");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_linear_same_bits_any_thread_count);
    tcase_add_test(tc, test_linear_wide_same_bits_any_thread_count);
    tcase_add_test(tc, test_matmul_same_bits_any_thread_count);
    tcase_add_test(tc, test_mha_same_bits_any_thread_count);
    tcase_add_test(tc, test_pool_resize_and_join);
    tcase_add_test(tc, test_guest_threads);
    suite_add_tcase(s, tc);
    return s;
}
