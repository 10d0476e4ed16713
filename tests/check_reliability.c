/* check_reliability.c - regression tests for the defects a hostile-argument
 * probe found (issue 10): each case crashed, hung, invoked undefined
 * behaviour or silently gave a wrong result before its fix. The list cases
 * (negative counts, out-of-range reads, more than 256 tensors) are in
 * check_lists.c. */
#include "check_nabla.h"

#include "nabla/random.h"
#include "core/platform.h" /* NB_ASAN */

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- 1. embedding keeps its own copy of the ids ----------------------------- */
START_TEST(test_embedding_ids_changed_before_backward) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_zeros(ctx, NB_F64, NB_SHAPE(4, 2)));
    nb_tensor *ids = nb_from_data(ctx, NB_I64, NB_SHAPE(2), (int64_t[]){0, 2});
    nb_tensor *y = nb_embedding(ctx, w, ids);
    ck_assert_ptr_nonnull(y);
    /* the caller reuses its buffer: one id far out of range */
    ((int64_t *)ids->data)[0] = 1;
    ((int64_t *)ids->data)[1] = (int64_t)1 << 40;
    ck_assert_int_eq(nb_backward(ctx, y, nb_ones(ctx, NB_F64, NB_SHAPE(2, 2))), NB_OK);
    /* the gradient goes to the rows picked in the forward: 0 and 2 */
    ck_assert_grad_near(w, ((double[]){1, 1, 0, 0, 1, 1, 0, 0}), 8, 0);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- 2. double -> i64 never casts an unrepresentable value -------------------- */
START_TEST(test_i64_conversions_refuse_nan_inf_and_range) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *t = nb_full(ctx, NB_I64, NB_SHAPE(2), 7);
    const double bad[] = {NAN, INFINITY, -INFINITY, 0x1p63, -0x1p64, 1e300};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        nb_set(t, 1, bad[k]);
        ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
        ck_assert_error_has(ctx, "set: value");
        ck_assert_error_has(ctx, "cannot be stored in an i64 tensor");
        ck_assert_double_eq(nb_get(t, 1), 7); /* unchanged */
        nb_ctx_clear_error(ctx);
    }
    /* the extremes that fit, and truncation toward zero */
    nb_set(t, 0, -0x1p63);
    ck_assert(((int64_t *)t->data)[0] == INT64_MIN);
    nb_set(t, 0, 0x1p63 - 1024);
    ck_assert(((int64_t *)t->data)[0] == INT64_MAX - 1023);
    nb_set(t, 0, -2.9);
    ck_assert(((int64_t *)t->data)[0] == -2);
    ck_assert_int_eq(nb_ctx_status(ctx), NB_OK);

    ck_assert_ptr_null(nb_full(ctx, NB_I64, NB_SHAPE(3), NAN));
    ck_assert_error_has(ctx, "full: value nan (element 0)");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_from_doubles(ctx, NB_I64, NB_SHAPE(2), (double[]){1, INFINITY}));
    ck_assert_error_has(ctx, "from_doubles: value inf (element 1)");
    nb_ctx_clear_error(ctx);
    nb_tensor *big = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){3, 1e19});
    ck_assert_ptr_null(nb_copy(ctx, big, NB_I64));
    ck_assert_error_has(ctx, "copy: value 1e+19");
    nb_ctx_clear_error(ctx);
    nb_tensor *ok = nb_copy(ctx, nb_from_doubles(ctx, NB_F64, NB_SHAPE(2), (double[]){3.7, -1e18}),
                            NB_I64);
    ck_assert_ptr_nonnull(ok);
    ck_assert(((int64_t *)ok->data)[0] == 3 && ((int64_t *)ok->data)[1] == -1000000000000000000);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- 3. writers report failed writes ---------------------------------------- */
START_TEST(test_tape_writers_report_a_full_disk) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(3)));
    nb_tensor *y = nb_sum(ctx, nb_mul(ctx, x, x));
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_OK);
    FILE *f = fopen("/dev/full", "w");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(nb_tape_dot(ctx, y, f), NB_ERR_IO);
    fclose(f);
    f = fopen("/dev/full", "w");
    ck_assert_int_eq(nb_tape_print(ctx, f), NB_ERR_IO);
    fclose(f);
    /* and a working stream still gives NB_OK */
    f = fopen("/dev/null", "w");
    ck_assert_int_eq(nb_tape_dot(ctx, y, f), NB_OK);
    ck_assert_int_eq(nb_tape_print(ctx, f), NB_OK);
    fclose(f);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- 4. loaders refuse what is not a regular file, without blocking ------------ */
static void expect_not_regular(const char *path, const char *kind) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list out = {0};
    ck_assert_int_eq(nb_load_safetensors(ctx, path, &out), NB_ERR_IO);
    ck_assert_error_has(ctx, "not a regular file");
    ck_assert_error_has(ctx, kind);
    nb_ctx_clear_error(ctx);
    nb_tensor *w = nb_requires_grad(nb_zeros(ctx, NB_F32, NB_SHAPE(2)));
    nb_list_add(&out, "w", w);
    ck_assert_int_eq(nb_load_checkpoint(ctx, path, &out, NULL, NULL), NB_ERR_IO);
    ck_assert_error_has(ctx, kind);
    ck_assert_int_eq(out.n, 1);
    nb_ctx_free(ctx);
}

START_TEST(test_loaders_refuse_fifo_device_and_directory) {
    char dir[] = "/tmp/nb-rel-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char fifo[64];
    snprintf(fifo, sizeof fifo, "%s/pipe.safetensors", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    expect_not_regular(fifo, "a FIFO"); /* hung forever in fopen before */
    expect_not_regular("/dev/zero", "a character device");
    expect_not_regular(dir, "a directory");
    unlink(fifo);
    rmdir(dir);
}
END_TEST

/* ---- 5. a NULL generator is refused, never dereferenced ------------------------ */
START_TEST(test_null_rng) {
    nb_pcg32_seed(NULL, 1, 2);
    ck_assert_uint_eq(nb_pcg32_next(NULL), 0);
    ck_assert_uint_eq(nb_pcg32_bounded(NULL, 10), 0);
    ck_assert(isnan(nb_pcg32_float(NULL)));
    ck_assert(isnan(nb_pcg32_double(NULL)));
    ck_assert(isnan(nb_pcg32_normal(NULL)));

    nb_ctx *ctx = nb_ctx_new(0);
#define EXPECT_NULL_RNG(failed)                                                  \
    do {                                                                       \
        ck_assert(failed);                                                     \
        ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_NULL);                     \
        ck_assert_error_has(ctx, "rng is NULL");                               \
        nb_ctx_clear_error(ctx);                                               \
    } while (0)
    EXPECT_NULL_RNG(nb_uniform(ctx, NB_F32, NB_SHAPE(2), 0, 1, NULL) == NULL);
    EXPECT_NULL_RNG(nb_normal(ctx, NB_F64, NB_SHAPE(2), 0, 1, NULL) == NULL);
    nb_tensor *x = nb_ones(ctx, NB_F32, NB_SHAPE(4));
    EXPECT_NULL_RNG(nb_dropout(ctx, x, 0.5, true, NULL) == NULL);
    nb_nn_linear lin;
    nb_nn_embedding emb;
    nb_nn_dropout drop;
    nb_nn_self_attention_v1 v1;
    nb_nn_self_attention_v2 v2;
    nb_nn_causal_attention ca;
    nb_nn_mha_wrapper wr;
    nb_nn_mha mha;
    EXPECT_NULL_RNG(nb_nn_linear_init(ctx, &lin, 2, 3, true, NB_F32, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_embedding_init(ctx, &emb, 5, 3, NB_F32, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_dropout_init(ctx, &drop, 0.5, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_self_attention_v1_init(ctx, &v1, 3, 2, NB_F32, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_self_attention_v2_init(ctx, &v2, 3, 2, false, NB_F32, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_causal_attention_init(ctx, &ca, 3, 2, 4, 0.0, false, NB_F32, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_mha_wrapper_init(ctx, &wr, 3, 2, 4, 0.0, 2, false, NB_F32, NULL) != NB_OK);
    EXPECT_NULL_RNG(nb_nn_mha_init(ctx, &mha, 4, 4, 4, 0.0, 2, false, NB_F32, NULL) != NB_OK);
#undef EXPECT_NULL_RNG
    /* p == 0 needs no generator */
    ck_assert_int_eq(nb_nn_dropout_init(ctx, &drop, 0.0, NULL), NB_OK);
    ck_assert_ptr_eq(nb_dropout(ctx, x, 0.0, true, NULL), x);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- 7. nb_ctx_fail with a NULL format ---------------------------------------- */
START_TEST(test_ctx_fail_null_format) {
    /* through a pointer, so the compiler's format check lets NULL through */
    nb_status (*fail_fn)(nb_ctx *, nb_status, const char *, ...) = nb_ctx_fail;
    nb_ctx *ctx = nb_ctx_new(0);
    ck_assert_int_eq(fail_fn(ctx, NB_ERR_VALUE, NULL), NB_ERR_VALUE);
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "value error");
    ck_assert_int_eq(fail_fn(NULL, NB_ERR_SHAPE, NULL), NB_ERR_SHAPE);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- 8. silently accepted before, errors now ------------------------------------ */
START_TEST(test_uniform_and_normal_arguments) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1, 1);
    ck_assert_ptr_null(nb_uniform(ctx, NB_F32, NB_SHAPE(2), 1.0, 0.5, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "uniform: lo 1, hi 0.5; expected lo <= hi");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_uniform(ctx, NB_F64, NB_SHAPE(2), 0, INFINITY, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_normal(ctx, NB_F32, NB_SHAPE(2), 0.0, -1.0, &rng));
    ck_assert_error_has(ctx, "normal: std is -1 (mean 0), expected std >= 0");
    nb_ctx_clear_error(ctx);
    ck_assert_ptr_null(nb_normal(ctx, NB_F32, NB_SHAPE(2), 0.0, NAN, &rng));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    /* the edges PyTorch accepts: lo == hi gives lo, std == 0 gives the mean */
    nb_tensor *u = nb_uniform(ctx, NB_F64, NB_SHAPE(3), 2.5, 2.5, &rng);
    nb_tensor *n = nb_normal(ctx, NB_F64, NB_SHAPE(3), -1.5, 0.0, &rng);
    ck_assert_tensor_near(u, ((double[]){2.5, 2.5, 2.5}), 3, 0);
    ck_assert_tensor_near(n, ((double[]){-1.5, -1.5, -1.5}), 3, 0);
    nb_ctx_free(ctx);
}
END_TEST

/* The documented behaviour (core.h): like retain_graph=True, a second
 * backward gives the leaves the gradient once more and restarts the
 * intermediate ones. */
START_TEST(test_second_backward_on_one_tape) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_from_doubles(ctx, NB_F64, NB_SHAPE(3), (double[]){1, 2, 3}));
    nb_tensor *sq = nb_mul(ctx, x, x);
    nb_tensor *y = nb_sum(ctx, sq);
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_OK);
    ck_assert_grad_near(x, ((double[]){2, 4, 6}), 3, 0);
    ck_assert_int_eq(nb_backward(ctx, y, NULL), NB_OK);
    ck_assert_grad_near(x, ((double[]){4, 8, 12}), 3, 0);
    ck_assert_grad_near(sq, ((double[]){1, 1, 1}), 3, 0);
    ck_assert_grad_near(y, ((double[]){1}), 1, 0);
    nb_ctx_free(ctx);
}
END_TEST

static void bw_copy(nb_ctx *ctx, nb_node *n) {
    nb_tensor *in = nb_node_input(n, 0);
    void *g = nb_grad_buffer(ctx, in);
    if (g) memcpy(g, nb_node_output(n)->grad, in->numel * sizeof(float));
}

START_TEST(test_record_output_twice_or_as_input) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    nb_tensor *out = nb_empty(ctx, NB_F32, NB_SHAPE(2));
    ck_assert_ptr_nonnull(nb_record(ctx, "first", out, 1, &x, bw_copy, NULL));
    ck_assert_ptr_null(nb_record(ctx, "second", out, 1, &x, bw_copy, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_STATE);
    ck_assert_error_has(ctx, "second: its output was already recorded by op #0 'first'");
    ck_assert_int_eq(nb_tape_len(ctx), 1);
    nb_ctx_clear_error(ctx);
    nb_tensor *loop = nb_empty(ctx, NB_F32, NB_SHAPE(2));
    nb_tensor *in[2] = {x, loop};
    ck_assert_ptr_null(nb_record(ctx, "cycle", loop, 2, in, bw_copy, NULL));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "cycle: input 2 is the output itself");
    ck_assert_int_eq(nb_tape_len(ctx), 1);
    nb_ctx_free(ctx);
}
END_TEST

START_TEST(test_checkpoint_optimizer_over_other_tensors) {
    char dir[] = "/tmp/nb-rel-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *w = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    nb_tensor *other = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(2)));
    nb_tensor_list saved = {0}, opt_list = {0};
    nb_list_add(&saved, "w", w);
    nb_list_add(&opt_list, "w", other);
    nb_optim *opt = nb_adam_new(ctx, &opt_list, nb_adam_defaults(0.1));
    ck_assert_int_eq(nb_save_checkpoint(ctx, path, &saved, opt, NULL, 0, NULL, NULL),
                     NB_ERR_VALUE);
    ck_assert_error_has(ctx, "the optimizer was built over other tensors than params");
    ck_assert_int_eq(access(path, F_OK), -1);
    nb_ctx_clear_error(ctx);
    /* the right optimizer saves; loading into the wrong one is refused too */
    nb_optim *good = nb_adam_new(ctx, &saved, nb_adam_defaults(0.1));
    ck_assert_int_eq(nb_save_checkpoint(ctx, path, &saved, good, NULL, 0, NULL, NULL), NB_OK);
    ck_assert_int_eq(nb_load_checkpoint(ctx, path, &saved, opt, NULL), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "'w' is another tensor");
    nb_optim_free(opt);
    nb_optim_free(good);
    unlink(path);
    rmdir(dir);
    nb_ctx_free(ctx);
}
END_TEST

/* ---- 9. use after reset, in NB_DEBUG builds (make debug) -------------------- */
#ifdef NB_DEBUG
START_TEST(test_debug_use_after_reset) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(3)));
    nb_tensor *loss = nb_sum(ctx, nb_mul(ctx, x, x));
    nb_ctx_reset(ctx);
    /* right after the reset */
    ck_assert(isnan(nb_item(loss)));
    nb_set(x, 0, 5.0); /* ignored */
    ck_assert_ptr_null(nb_add(ctx, x, x));
    ck_assert_int_eq(nb_ctx_status(ctx), NB_ERR_STATE);
    ck_assert_error_has(ctx, "add: input 1 was used after its context was reset");
    nb_ctx_clear_error(ctx);
    /* the next step makes the same tensors again, in the same order */
    nb_tensor *x2 = nb_requires_grad(nb_ones(ctx, NB_F32, NB_SHAPE(3)));
    nb_tensor *loss2 = nb_sum(ctx, nb_mul(ctx, x2, x2));
    ck_assert_double_eq(nb_item(loss2), 3);
    ck_assert(isnan(nb_item(loss)));
    ck_assert_ptr_null(nb_mul(ctx, x2, x));
    ck_assert_error_has(ctx, "mul: input 2 was used after its context was reset");
    nb_ctx_clear_error(ctx);
    ck_assert_int_eq(nb_backward(ctx, loss, NULL), NB_ERR_STATE);
    ck_assert_error_has(ctx, "backward: input 1 was used after its context was reset");
    nb_ctx_clear_error(ctx);
    /* tensors of another context are unaffected */
    nb_ctx *params = nb_ctx_new(0);
    nb_tensor *w = nb_ones(params, NB_F32, NB_SHAPE(3));
    ck_assert_ptr_nonnull(nb_mul(ctx, w, x2));
    ck_assert_int_eq(nb_backward(ctx, loss2, NULL), NB_OK);
    nb_ctx_free(params);
    nb_ctx_free(ctx);
}
END_TEST
#endif

/* ---- 10. ASan sees an op writing past its tensor (make test-asan) ------------- */
#if NB_ASAN
#include <sys/wait.h>

/* A custom op whose forward writes one element past its output, as a buggy
 * kernel would: the next arena allocation sits right behind it. */
static void write_past_output(void) {
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *out = nb_empty(ctx, NB_F32, NB_SHAPE(16)); /* 64 bytes: no padding */
    nb_tensor *next = nb_zeros(ctx, NB_F32, NB_SHAPE(16));
    ((volatile float *)out->data)[16] = 1.0f;
    printf("not caught: %g\n", nb_get(next, 0));
    nb_ctx_free(ctx);
}

START_TEST(test_asan_sees_arena_overflow) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        close(fds[0]);
        write_past_output();
        _exit(0);
    }
    close(fds[1]);
    char report[8192] = {0};
    size_t got = 0;
    ssize_t r;
    while (got < sizeof report - 1 && (r = read(fds[0], report + got, sizeof report - 1 - got)) > 0)
        got += (size_t)r;
    close(fds[0]);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "the overflow was not caught");
    ck_assert_msg(strstr(report, "AddressSanitizer: use-after-poison") != NULL, "report: %s", report);
    ck_assert_msg(strstr(report, "WRITE of size 4") != NULL, "report: %s", report);
}
END_TEST
#endif

Suite *suite_reliability(void) {
    Suite *s = suite_create("reliability");
    TCase *tc = tcase_create("defects");
    tcase_add_test(tc, test_embedding_ids_changed_before_backward);
    tcase_add_test(tc, test_i64_conversions_refuse_nan_inf_and_range);
    tcase_add_test(tc, test_tape_writers_report_a_full_disk);
    tcase_add_test(tc, test_loaders_refuse_fifo_device_and_directory);
    tcase_add_test(tc, test_null_rng);
    tcase_add_test(tc, test_ctx_fail_null_format);
    tcase_add_test(tc, test_uniform_and_normal_arguments);
    tcase_add_test(tc, test_second_backward_on_one_tape);
    tcase_add_test(tc, test_record_output_twice_or_as_input);
    tcase_add_test(tc, test_checkpoint_optimizer_over_other_tensors);
#ifdef NB_DEBUG
    tcase_add_test(tc, test_debug_use_after_reset);
#endif
#if NB_ASAN
    tcase_add_test(tc, test_asan_sees_arena_overflow);
#endif
    suite_add_tcase(s, tc);
    return s;
}
