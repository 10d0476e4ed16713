/* check_gpt_tool.c - runs the nabla-gpt program: `train --init --batches`
 * against PyTorch's own runs of the same models (tests/fixtures/gpt, written
 * by tools/ref/gen_gpt_fixtures.py) in both layouts, bit-identical --resume,
 * sampling from a trained model, and its errors on bad input; `init` and
 * docs/gpt.md's GPT-2 fine-tune, run as the page writes it.
 * The program is $NB_BUILD_DIR/bin/nabla-gpt (or build/bin/nabla-gpt). */
#include "gpt_run.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define GPT_FIXTURES NB_SOURCE_DIR "/tests/fixtures/gpt/"

static void write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* The per-iteration "loss" and "lr" of a log.jsonl, in order; returns the count. */
static int read_log(const char *dir, double *loss, double *lr, int max) {
    char path[128], buf[65536];
    snprintf(path, sizeof path, "%s/log.jsonl", dir);
    nb_test_read_text(path, buf, sizeof buf);
    int n = 0;
    for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n")) {
        int it;
        double a, b;
        if (sscanf(l, "{\"iter\": %d, \"loss\": %lf, \"lr\": %lf", &it, &a, &b) == 3 && n < max) {
            ck_assert_int_eq(it, n);
            loss[n] = a, lr[n++] = b;
        }
    }
    return n;
}

/* ---- parity with PyTorch ----------------------------------------------------------- */
static const char *const RUNS[] = {"gptmodel_qkv_course", "gptmodel_cosine_clip",
                                   "nanogpt_bias_accum", "nanogpt_nobias_course"};

/* The key bias: W_key.bias, or the middle third of c_attn.bias. Its
 * gradient is exactly zero in exact arithmetic (it adds one constant to a
 * query's every score, which softmax ignores), so it sees only rounding
 * noise, which AdamW turns into lr-sized steps of arbitrary sign: in float32
 * it differs from PyTorch's as PyTorch's differs between machines (README,
 * nabla-train). float64 still matches it to 1e-8. */
static bool key_bias(const char *name, size_t j, size_t n) {
    size_t len = strlen(name);
    if (len >= 10 && !strcmp(name + len - 10, "W_key.bias")) return true;
    return len >= 11 && !strcmp(name + len - 11, "c_attn.bias") && j >= n / 3 && j < 2 * n / 3;
}

static void parity_case_tol(const char *name, bool f64, double loss_tol, double w_tol);

static void parity_case(const char *name, bool f64) {
    parity_case_tol(name, f64, f64 ? 1e-9 : 1e-5, f64 ? 1e-8 : 5e-4);
}

/* loss_tol relative, w_tol absolute. */
static void parity_case_tol(const char *name, bool f64, double loss_tol, double w_tol) {
    char ref_path[512];
    snprintf(ref_path, sizeof ref_path, GPT_FIXTURES "%s_%s.safetensors", name, f64 ? "f64" : "f32");
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor_list ref = {0};
    const char *k[8], *v[8];
    int n_meta = 0;
    ck_assert_msg(nb_load_safetensors_meta(c, ref_path, &ref, 8, &n_meta, k, v) == NB_OK, "%s",
                  nb_ctx_error(c));
    const char *args = NULL, *init = NULL, *batches = NULL;
    for (int i = 0; i < n_meta && i < 8; i++) {
        if (!strcmp(k[i], "args")) args = v[i];
        if (!strcmp(k[i], "init")) init = v[i];
        if (!strcmp(k[i], "batches")) batches = v[i];
    }
    ck_assert(args && init && batches);
    gpt_run r;
    gpt_run_init(&r);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "train --init=%s%s --batches=%s%s --out_dir=%%D/out %s",
             GPT_FIXTURES, init, GPT_FIXTURES, batches, args);
    gpt_exec(&r, cmd);
    ck_assert_msg(r.status == 0, "%s: exit %d: %s", name, r.status, r.err);
    /* per-iteration losses and learning rates against PyTorch's */
    double loss[64], lr[64];
    char out[128];
    snprintf(out, sizeof out, "%s/out", r.dir);
    nb_tensor *want_loss = nb_list_get(&ref, "loss"), *want_lr = nb_list_get(&ref, "lr");
    int n = read_log(out, loss, lr, 64);
    ck_assert_int_eq(n, (int)want_loss->numel);
    for (int i = 0; i < n; i++) {
        double w = nb_get(want_loss, i);
        ck_assert_msg(fabs(loss[i] - w) <= loss_tol * fabs(w), "%s iter %d: loss %.17g vs PyTorch %.17g",
                      name, i, loss[i], w);
        ck_assert_double_eq_tol(lr[i], nb_get(want_lr, i), 1e-15);
    }
    /* final weights: every tensor of PyTorch's state_dict */
    nb_tensor_list got = {0};
    char model[160];
    snprintf(model, sizeof model, "%s/model.safetensors", out);
    ck_assert_msg(nb_load_safetensors(c, model, &got) == NB_OK, "%s", nb_ctx_error(c));
    int compared = 0;
    for (int i = 0; i < ref.n; i++) {
        if (!strcmp(ref.names[i], "loss") || !strcmp(ref.names[i], "lr")) continue;
        nb_tensor *g = nb_list_get(&got, ref.names[i]), *w = ref.t[i];
        ck_assert_msg(g && g->numel == w->numel, "%s: %s missing or misshapen", name, ref.names[i]);
        for (size_t j = 0; j < w->numel; j++)
            ck_assert_msg((!f64 && key_bias(ref.names[i], j, w->numel)) ||
                              fabs(nb_get(g, j) - nb_get(w, j)) <= w_tol,
                          "%s: %s[%zu] = %.17g vs PyTorch %.17g", name, ref.names[i], j,
                          nb_get(g, j), nb_get(w, j));
        compared++;
    }
    ck_assert_int_ge(compared, 10);
    gpt_run_done(&r);
    nb_ctx_free(c);
}

START_TEST(test_parity_f64) { parity_case(RUNS[_i], true); }
END_TEST

START_TEST(test_parity_f32) { parity_case(RUNS[_i], false); }
END_TEST

/* --optimizer=muon against tools/ref/muon_ref.py's Muon with torch's AdamW
 * (MuonWithAuxAdam's grouping), both layouts: the losses and every weight
 * within 1e-10 in float64 and 1e-5 in float32. */
static const char *const MUON_RUNS[] = {"gptmodel_muon", "nanogpt_muon"};

START_TEST(test_parity_muon) {
    bool f64 = _i % 2 == 0;
    parity_case_tol(MUON_RUNS[_i / 2], f64, f64 ? 1e-10 : 1e-5, f64 ? 1e-10 : 1e-5);
}
END_TEST

/* ---- text training, resume, sample -------------------------------------------------- */
#define SMALL "--n_layer=2 --n_head=2 --n_embd=16 --block_size=16 --batch_size=4 " \
              "--eval_interval=4 --eval_iters=2 --dropout=0.1 --warmup_iters=2 --lr_decay_iters=8 " \
              "--data=%D/text.txt"

START_TEST(test_resume_is_bit_identical) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    gpt_exec(&r, "train " SMALL " --max_iters=8 --out_dir=%D/a");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "step 8: train loss"));
    gpt_exec(&r, "train " SMALL " --max_iters=5 --out_dir=%D/b");
    ck_assert_msg(r.status == 0, "%s", r.err);
    gpt_exec(&r, "train " SMALL " --max_iters=8 --out_dir=%D/b --resume");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "8 iterations from 5"));
    double la[16], lb[16], ra[16], rb[16];
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/a", r.dir);
    snprintf(b, sizeof b, "%s/b", r.dir);
    ck_assert_int_eq(read_log(a, la, ra, 16), 8);
    ck_assert_int_eq(read_log(b, lb, rb, 16), 8);
    for (int i = 0; i < 8; i++) ck_assert(la[i] == lb[i] && ra[i] == rb[i]);
    /* the models are the same bytes */
    char pa[160], pb[160], ba[200000], bb[200000];
    snprintf(pa, sizeof pa, "%s/model.safetensors", a);
    snprintf(pb, sizeof pb, "%s/model.safetensors", b);
    FILE *fa = fopen(pa, "rb"), *fb = fopen(pb, "rb");
    ck_assert(fa && fb);
    size_t na = fread(ba, 1, sizeof ba, fa), nb = fread(bb, 1, sizeof bb, fb);
    fclose(fa), fclose(fb);
    ck_assert_uint_gt(na, 1000);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(ba, bb, na) == 0);
    /* sampling from it: the prompt comes back first, multibyte characters work */
    gpt_exec(&r, "sample --out_dir=%D/a --start=caf\xc3\xa9 --num_samples=2 --max_new_tokens=20");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert(strncmp(r.out, "caf\xc3\xa9", 5) == 0);
    ck_assert_ptr_nonnull(strstr(r.out, "---------------\ncaf\xc3\xa9"));
    /* a prompt character the model never saw */
    gpt_exec(&r, "sample --out_dir=%D/a --start=Q");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "U+0051 ('Q') at byte offset 0 is not in the vocabulary"));
    /* outputs of an earlier run are not overwritten without --force */
    gpt_exec(&r, "train " SMALL " --max_iters=1 --out_dir=%D/a");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "exists from an earlier run"));
    gpt_run_done(&r);
}
END_TEST

START_TEST(test_bad_input) {
    gpt_run r;
    gpt_run_init(&r);
    char p[128];
    snprintf(p, sizeof p, "%s/empty.txt", r.dir);
    write_file(p, "", 0);
    snprintf(p, sizeof p, "%s/bad.txt", r.dir);
    write_file(p, "abc\xff" "def", 7);
    snprintf(p, sizeof p, "%s/short.txt", r.dir);
    write_file(p, "hello world, hello world, hello world", 37);
    const struct {
        const char *args, *msg;
    } cases[] = {
        {"train --data=%D/empty.txt --out_dir=%D/o", "the text is empty"},
        {"train --data=%D/bad.txt --out_dir=%D/o", "not valid UTF-8: byte offset 3 (0xff)"},
        {"train --data=%D/short.txt --out_dir=%D/o --block_size=8",
         "37 characters are too few: the 90% train and 10% val parts need at least "
         "block_size + 1 = 9"},
        {"train --data=%D/nonexistent.txt --out_dir=%D/o", "nonexistent.txt: No such file"},
        {"train --out_dir=%D/o", "train needs one of --data=FILE, --dataset=NAME and --batches=FILE"},
        {"train --n_layers=3", "unknown flag '--n_layers' for train"},
        {"train --n_layer=zero", "--n_layer: 'zero' is not an integer >= 1"},
        {"train --decay_lr=maybe", "--decay_lr: 'maybe' is not True or False"},
        {"train --n_embd=30 --n_head=4", "--n_embd=30 is not divisible by --n_head=4"},
        {"train --batches=" GPT_FIXTURES "init_gptmodel.safetensors --out_dir=%D/o",
         "needs tensors 'x' and 'y'"},
        {"train --batches=" GPT_FIXTURES "batches.safetensors --out_dir=%D/o",
         "--batches without --init needs --vocab_size"},
        {"train --batches=" GPT_FIXTURES "batches.safetensors --vocab_size=5 --out_dir=%D/o",
         "outside the vocabulary 0..4"},
        {"sample --out_dir=%D/nowhere", "model.safetensors"},
        {"fly", "unknown command 'fly'"},
        {"bench --config=gpt2-125m", "--config: 'gpt2-125m' is not a known config (gpt2-124m)"},
        {"bench --seq_len=100 --block_size=64", "--seq_len=100 is more than --block_size=64"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gpt_exec(&r, cases[i].args);
        ck_assert_msg(r.status == 2, "%s: exit %d", cases[i].args, r.status);
        ck_assert_msg(strstr(r.err, cases[i].msg), "%s: stderr '%s' lacks '%s'", cases[i].args,
                      r.err, cases[i].msg);
    }
    /* --help: usage with every default on stdout, exit 0, nothing created */
    gpt_exec(&r, "train --help --out_dir=%D/h");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "--gradient_accumulation_steps=1"));
    ck_assert_ptr_nonnull(strstr(r.out, "--weight_decay_1d=False"));
    struct stat st;
    snprintf(p, sizeof p, "%s/h", r.dir);
    ck_assert_int_ne(stat(p, &st), 0);
    snprintf(p, sizeof p, "%s/o", r.dir);
    ck_assert_int_ne(stat(p, &st) == 0 && st.st_nlink > 2, 1);
    gpt_run_done(&r);
}
END_TEST

/* Fine-tuning a Hugging Face GPT-2 checkpoint from the command line:
 * `train --init_from=model.safetensors` (GPT2LMHeadModel names, Conv1D
 * weights, config.json beside it) replaying the 20 batches of
 * tests/fixtures/hf/ref.safetensors in float64, with the AdamW settings
 * tools/ref/gen_hf_fixtures.py used: the losses must be PyTorch's (the
 * library's own test, check_gpt_hf.c, runs the same steps in-process). */
START_TEST(test_hf_finetune_from_the_command_line) {
    gpt_run r;
    gpt_run_init(&r);
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor_list ref = {0}, batches = {0};
    ck_assert_msg(nb_load_safetensors(c, NB_SOURCE_DIR "/tests/fixtures/hf/ref.safetensors", &ref) ==
                      NB_OK, "%s", nb_ctx_error(c));
    nb_tensor *want = nb_list_get(&ref, "lmhead.loss");
    ck_assert_ptr_nonnull(want);
    nb_list_add(&batches, "x", nb_list_get(&ref, "lmhead.x"));
    nb_list_add(&batches, "y", nb_list_get(&ref, "lmhead.y"));
    char path[128];
    snprintf(path, sizeof path, "%s/batches.safetensors", r.dir);
    ck_assert_int_eq(nb_save_safetensors(c, path, &batches, 0, NULL, NULL), NB_OK);
    gpt_exec(&r, "train --init_from=" NB_SOURCE_DIR "/tests/fixtures/hf/lmhead/model.safetensors "
                 "--batches=%D/batches.safetensors --out_dir=%D/out --dtype=float64 "
                 "--learning_rate=3e-3 --beta2=0.95 --weight_decay=0.1 --decay_lr=False "
                 "--grad_clip=0 --max_iters=20");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    double loss[64], lr[64];
    char out[128];
    snprintf(out, sizeof out, "%s/out", r.dir);
    int n = read_log(out, loss, lr, 64);
    ck_assert_int_eq(n, (int)want->numel);
    for (int i = 0; i < n; i++)
        ck_assert_msg(fabs(loss[i] - nb_get(want, (size_t)i)) <= 1e-9,
                      "step %d: loss %.17g, PyTorch %.17g", i, loss[i], nb_get(want, (size_t)i));
    nb_list_free(&batches);
    nb_list_free(&ref);
    nb_ctx_free(c);
    gpt_run_done(&r);
}
END_TEST

/* bench --config=gpt2-124m with smaller widths given beside it: the preset
 * fills the rest (nanogpt, biases, batch 4 of 64 tokens), and the step's
 * FLOPs are counted as llm.c does. For 1 layer, 48 wide, vocab 65, block 70:
 * 31488 matmul parameters (34848 less the position table's 3360), so
 * 6 * 31488 * 256 tokens + 12 * 4 * 64^2 * 48 for attention = 57802752. */
START_TEST(test_bench_preset_and_flops) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_exec(&r, "bench --config=gpt2-124m --n_layer=1 --n_embd=48 --vocab_size=65 --block_size=70 "
                 "--max_iters=1 --rounds=1");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "gflop_per_step=0.0578028 "), "%s", r.out);
    ck_assert_msg(strstr(r.out, "tok_per_s="), "%s", r.out);
    /* 31488 float32 weights read per sampled token */
    ck_assert_msg(strstr(r.out, "weight_mb_per_token=0.126 "), "%s", r.out);
    double pct = -1, bw = -1;
    const char *p = strstr(r.out, "pct_of_bandwidth="), *q = strstr(r.out, "copy_gb_per_s=");
    ck_assert_msg(p && q && sscanf(p, "pct_of_bandwidth=%lf", &pct) == 1 &&
                  sscanf(q, "copy_gb_per_s=%lf", &bw) == 1, "%s", r.out);
    ck_assert(pct > 0 && bw > 0);
    gpt_run_done(&r);
}
END_TEST

/* docs/gpt.md's fine-tune, as written there: prepare --tokenizer=gpt2,
 * init, train --init_from, sample (the download replaced by a short text). */
START_TEST(test_docs_finetune_walkthrough) {
    gpt_run r;
    gpt_run_init(&r);
    static char cmds[16][1024];
    int n = gpt_doc_commands("<!-- tests/check_gpt_tool.c runs the commands of the next block -->",
                         cmds, 16);
    ck_assert_int_eq(n, 5);
    char prog[512], cmd[4096], *out = NULL;
    snprintf(prog, sizeof prog, "%s/bin/nabla-gpt", nb_test_build_dir());
    for (int i = 0; i < n; i++) {
        if (!strncmp(cmds[i], "curl ", 5)) { /* the Shakespeare text: a shorter one here */
            ck_assert_ptr_nonnull(strstr(cmds[i], "/tinyshakespeare/input.txt"));
            snprintf(cmd, sizeof cmd, "cd '%s' && for i in 1 2 3 4 5 6; do cat "
                     NB_SOURCE_DIR "/tests/fixtures/prepare/input.txt; done >input.txt", r.dir);
        } else {
            const char *bin = "build/bin/nabla-gpt";
            ck_assert_msg(!strncmp(cmds[i], bin, strlen(bin)), "%s", cmds[i]);
            snprintf(cmd, sizeof cmd, "cd '%s' && '%s'%s 2>&1", r.dir, prog, cmds[i] + strlen(bin));
        }
        int st = nb_test_run(cmd, &out);
        ck_assert_msg(st == 0, "%s: exit %d: %s", cmds[i], st, out);
        if (i == 2) ck_assert_msg(strstr(out, "nabla-gpt: wrote gpt2-tiny/model.safetensors and "
                                         "gpt2-tiny/config.json: GPT-2 layout, 2 layers, 2 heads, "
                                         "n_embd 32, vocab 50257"), "%s", out);
        if (i == 3) {
            ck_assert_msg(strstr(out, "nanogpt, ") && strstr(out, "vocab 50257, 10 iterations"),
                          "%s", out);
            ck_assert_msg(strstr(out, "step 10: train loss "), "%s", out);
        }
        if (i == 4) {
            ck_assert_msg(!strncmp(out, "ROMEO:", 6), "%s", out);
            ck_assert_ptr_nonnull(strstr(out, "\n---------------\n"));
        }
        free(out);
    }
    /* init refuses to replace the model without --force, and needs --out */
    gpt_exec(&r, "init --n_layer=1 --n_head=2 --n_embd=8 --block_size=8 --out=gpt2-tiny");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "init: gpt2-tiny/model.safetensors exists: pass --force"));
    gpt_exec(&r, "init --n_layer=1");
    ck_assert_int_eq(r.status, 2);
    ck_assert_ptr_nonnull(strstr(r.err, "init needs --out=DIR"));
    gpt_run_done(&r);
}
END_TEST

/* A model whose vocabulary is smaller than the data's ids (the HF fixture,
 * vocab 100, on ids up to 150): refused before the first step, exit 2,
 * nothing written. */
START_TEST(test_dataset_ids_against_vocab) {
    gpt_run r;
    gpt_run_init(&r);
    char p[256];
    uint16_t ids[400];
    for (int i = 0; i < 400; i++) ids[i] = (uint16_t)(i % 97);
    ids[333] = 149;
    snprintf(p, sizeof p, "%s/ds", r.dir);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    snprintf(p, sizeof p, "%s/ds/train.bin", r.dir);
    write_file(p, (const char *)ids, 300 * 2);
    snprintf(p, sizeof p, "%s/ds/val.bin", r.dir);
    write_file(p, (const char *)(ids + 300), 100 * 2);
    gpt_exec(&r, "train --init_from=" NB_SOURCE_DIR "/tests/fixtures/hf/lmhead/model.safetensors "
                 "--dataset=ds --out_dir=o --block_size=16 --max_iters=2");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--dataset=ds: val.bin holds token id 149 (at index 33), but the "
                         "model's vocabulary is 100 (ids 0..99)"), "%s", r.err);
    ck_assert_ptr_nonnull(strstr(r.err, "Nothing was written."));
    snprintf(p, sizeof p, "%s/o", r.dir);
    ck_assert_int_ne(access(p, F_OK), 0);
    /* ids below 100 train */
    ids[333] = 5;
    snprintf(p, sizeof p, "%s/ds/val.bin", r.dir);
    write_file(p, (const char *)(ids + 300), 100 * 2);
    gpt_exec(&r, "train --init_from=" NB_SOURCE_DIR "/tests/fixtures/hf/lmhead/model.safetensors "
                 "--dataset=ds --out_dir=o --block_size=16 --batch_size=2 --eval_iters=1 --max_iters=2");
    ck_assert_msg(r.status == 0, "%s", r.err);
    gpt_run_done(&r);
}
END_TEST

Suite *suite_gpt_tool(void) {
    Suite *s = suite_create("gpt_tool");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_parity_f64, 0, 4);
    tcase_add_loop_test(tc, test_parity_f32, 0, 4);
    tcase_add_loop_test(tc, test_parity_muon, 0, 4);
    tcase_add_test(tc, test_resume_is_bit_identical);
    tcase_add_test(tc, test_bad_input);
    tcase_add_test(tc, test_bench_preset_and_flops);
    tcase_add_test(tc, test_hf_finetune_from_the_command_line);
    tcase_add_test(tc, test_docs_finetune_walkthrough);
    tcase_add_test(tc, test_dataset_ids_against_vocab);
    suite_add_tcase(s, tc);
    return s;
}
