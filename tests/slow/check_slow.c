/* check_slow.c - tests too big for `make test`, run by `make test-slow`:
 * two GPTs saved and loaded as training checkpoints with their AdamW state,
 * timed, with the peak resident memory during the save and the load:
 *   - the course's GPTModel 124M (163M parameters, 161 tensors, 484 AdamW
 *     state tensors: past the old 256-entry list cap);
 *   - nanoGPT's GPT-2 124M (124M parameters, biases, vocab 50257, block
 *     1024): 2 GB with the AdamW state.
 * About 5 GB of memory at the peak and a 2-3 GB file in a temporary
 * directory (removed). The times are printed, not asserted (a loaded
 * machine is slower, not wrong); the memory is asserted: a save or a load
 * may add at most a fifth to the resident memory of the model and its
 * optimizer (no second copy of anything). */
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

/* Resident memory (kB): VmRSS now, or VmHWM (the peak since the last
 * reset_peak). */
static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == ':') kb = atol(line + n + 1);
    if (f) fclose(f);
    return kb;
}

/* Linux: writing 5 to clear_refs resets VmHWM to the current RSS. */
static void reset_peak(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) fputs("5", f), fclose(f);
}

/* build, one AdamW step, save; a second step gives H2. Then wipe the
 * parameters, load into a fresh optimizer, take the same second step: H2
 * again, bit for bit, so parameters, m, v and every step count came back. */
static void round_trip(const char *label, nb_gpt_config cfg, int64_t want_params,
                       int want_tensors) {
    double t0 = now();
    nb_ctx *p = nb_ctx_new(0), *ctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 1);
    nb_gpt m;
    ck_assert_int_eq(nb_gpt_init(p, &m, &cfg, &rng), NB_OK);
    ck_assert_int_eq(nb_gpt_num_params(&m, false), want_params);
    ck_assert_int_eq(m.params.n, want_tensors);
    nb_optim *opt = make_opt(&m, p);
    ck_assert_ptr_nonnull(opt);
    fill_grads(&m.params);
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    double t_build = now() - t0;

    char dir[] = "/tmp/nabla-slow-XXXXXX", path[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/gpt.safetensors", dir);
    long own = status_kb("VmRSS"); /* parameters, gradients, m and v */
    reset_peak();
    t0 = now();
    nb_status st = nb_save_checkpoint(ctx, path, &m.params, opt, NULL, 0, NULL, NULL);
    ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(ctx));
    double t_save = now() - t0;
    long save_peak = status_kb("VmHWM");
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    uint64_t h2 = params_hash(&m.params);
    nb_optim_free(opt);

    for (int i = 0; i < m.params.n; i++) {
        nb_tensor *t = nb_list_tensor(&m.params, i);
        memset(t->data, 0, t->numel * nb_dtype_size(t->dtype));
    }
    opt = make_opt(&m, p);
    reset_peak();
    t0 = now();
    st = nb_load_checkpoint(ctx, path, &m.params, opt, NULL);
    double t_load = now() - t0;
    long load_peak = status_kb("VmHWM");
    unlink(path);
    rmdir(dir);
    ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(ctx));
    ck_assert_int_eq(nb_optim_step_count(opt), 1);
    ck_assert_uint_ne(params_hash(&m.params), h2);
    ck_assert_int_eq(nb_optim_step(opt), NB_OK);
    ck_assert_uint_eq(params_hash(&m.params), h2);
    printf("%s checkpoint (%.2f GB with AdamW state): build+step %.1f s, save %.2f s, "
           "load %.2f s; peak RSS during save %.2f x the model's %.0f MB, during load %.2f x\n",
           label, 4.0 * 4 * (double)want_params / 1e9, t_build, t_save, t_load,
           (double)save_peak / (double)own, own / 1024.0, (double)load_peak / (double)own);
    fflush(stdout);
    ck_assert_msg(own > 0 && save_peak <= 1.2 * own && load_peak <= 1.2 * own,
                  "%s: peak RSS save %ld kB, load %ld kB, model %ld kB", label, save_peak,
                  load_peak, own);
    nb_optim_free(opt);
    nb_gpt_free(&m);
    nb_ctx_free(ctx);
    nb_ctx_free(p);
}

START_TEST(test_gpt124m_checkpoint_adamw) {
    round_trip("GPTModel 124M", nb_gpt_config_default(NB_GPT_GPTMODEL), 163009536, 161);
}
END_TEST

/* GPT-2 124M as nanoGPT builds it: 12 x (2 LayerNorms of 2, c_attn, c_proj,
 * c_fc, mlp c_proj of 2) + wte, wpe, ln_f of 2 = 148 tensors. */
START_TEST(test_gpt2_124m_checkpoint_adamw) {
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_NANOGPT);
    c.vocab_size = 50257, c.block_size = 1024, c.n_layer = 12, c.n_head = 12, c.n_embd = 768;
    c.bias = true, c.dropout = 0.0;
    round_trip("GPT-2 124M", c, 124439808, 148);
}
END_TEST

int main(void) {
    Suite *s = suite_create("slow");
    TCase *tc = tcase_create("gpt124m");
    tcase_add_test(tc, test_gpt124m_checkpoint_adamw);
    tcase_add_test(tc, test_gpt2_124m_checkpoint_adamw);
    tcase_set_timeout(tc, 900);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
