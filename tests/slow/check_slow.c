/* check_slow.c - tests too big for `make test`, run by `make test-slow`:
 * the course's GPTModel 124M (163M parameters, 161 tensors, 484 AdamW state
 * tensors: past the old 256-entry list cap) saved and loaded as a training
 * checkpoint with its AdamW state. About 5 GB of memory at the peak and a 2
 * GB file in a temporary directory (removed). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nabla.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* FNV-1a over every parameter's bytes */
static uint64_t params_hash(const nb_tensor_list *l) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < l->n; i++) {
        const nb_tensor *t = nb_list_tensor(l, i);
        const unsigned char *p = t->data;
        for (size_t k = 0; k < t->numel * nb_dtype_size(t->dtype); k++)
            h = (h ^ p[k]) * 1099511628211ull;
    }
    return h;
}

/* A fixed gradient for every parameter (what a backward would leave). */
static void fill_grads(const nb_tensor_list *l) {
    uint32_t x = 12345;
    for (int i = 0; i < l->n; i++) {
        nb_tensor *t = nb_list_tensor(l, i);
        float *g = t->grad;
        for (size_t k = 0; k < t->numel; k++) {
            x = x * 1664525u + 1013904223u;
            g[k] = ((float)(x >> 8) / 16777216.0f - 0.5f) * 1e-3f;
        }
    }
}

static nb_optim *make_opt(const nb_gpt *m, nb_ctx *err) {
    nb_adam_opts o = nb_adamw_defaults(6e-4);
    o.beta2 = 0.95;
    o.weight_decay = 0.1;
    return nb_adamw_new_groups(err, &m->params, o, false);
}

/* build, one AdamW step, save; a second step gives H2. Then wipe the
 * parameters, load into a fresh optimizer, take the same second step: H2
 * again, bit for bit, so parameters, m, v and every step count came back. */
START_TEST(test_gpt124m_checkpoint_adamw) {
    double t0 = now();
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 1);
    nb_gpt_config cfg = nb_gpt_config_default(NB_GPT_GPTMODEL);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &cfg, &rng), NB_OK);
    ck_assert_int_eq(nb_gpt_num_params(&m, false), 163009536);
    ck_assert_int_eq(m.params.n, 161);
    nb_optim *opt = make_opt(&m, p);
    ck_assert_ptr_nonnull(opt);
    fill_grads(&m.params);
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    double t_build = now() - t0;

    char dir[] = "/tmp/nabla-slow-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/gpt124m.safetensors", dir);
    t0 = now();
    nb_status st = nb_save_checkpoint(ctx, path, &m.params, opt, NULL, 0, NULL, NULL);
    ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(ctx));
    double t_save = now() - t0;
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    uint64_t h2 = params_hash(&m.params);
    nb_optim_free(opt);

    for (int i = 0; i < m.params.n; i++) {
        nb_tensor *t = nb_list_tensor(&m.params, i);
        memset(t->data, 0, t->numel * nb_dtype_size(t->dtype));
    }
    opt = make_opt(&m, p);
    t0 = now();
    st = nb_load_checkpoint(ctx, path, &m.params, opt, NULL);
    double t_load = now() - t0;
    unlink(path);
    rmdir(dir);
    ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(ctx));
    ck_assert_int_eq(nb_optim_step_count(opt), 1);
    ck_assert_uint_ne(params_hash(&m.params), h2);
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    ck_assert_uint_eq(params_hash(&m.params), h2);
    printf("gpt124m checkpoint: build+step %.1f s, save %.1f s, load %.1f s\n", t_build, t_save,
           t_load);
    nb_optim_free(opt);
    nb_gpt_free(&m);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}
END_TEST

int main(void) {
    Suite *s = suite_create("slow");
    TCase *tc = tcase_create("gpt124m");
    tcase_add_test(tc, test_gpt124m_checkpoint_adamw);
    tcase_set_timeout(tc, 900);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
