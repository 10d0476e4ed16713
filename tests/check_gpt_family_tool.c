/* check_gpt_family_tool.c - nabla-gpt with the Llama 3 and Qwen3 families
 * (--arch=llama3|qwen3 and their flags), run as a program:
 *   - 20 steps from scratch of a tiny Llama 3 (GQA), Qwen3 (MQA, head_dim
 *     != n_embd / n_head, tied head, Hugging Face names) and Qwen3-MoE
 *     (top-2 of 4): the validation loss falls, out_dir is a model directory
 *     (its config beside model.safetensors) that sample reads;
 *   - Ctrl-C at a step of the MoE run, then --resume: the same bytes as the
 *     run that was not interrupted (the checkpoint rebuilds the family);
 *   - init of a Llama as LlamaForCausalLM's files, then train
 *     --init_from=DIR/model.safetensors on it (and the course's layout);
 *   - bad flags and configs: exit 2, a message naming the flag or key,
 *     nothing written;
 *   - --diagnostics on Qwen3-MoE and Llama 3: a line per RMSNorm, gated MLP
 *     and expert, named by module. */
#include "gpt_run.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <sys/stat.h>

#define SMALL "--n_layer=2 --n_head=4 --n_embd=32 --block_size=16 --batch_size=4 " \
              "--eval_interval=10 --eval_iters=2 --warmup_iters=2 --max_iters=20 "    \
              "--learning_rate=3e-3 --data=text.txt --threads=1"

/* The validation losses of dir/log.jsonl: the first and the last. */
static void val_losses(const gpt_run *r, const char *dir, double *first, double *last) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s/log.jsonl", r->dir, dir);
    char *text = nb_test_read(p, NULL), *save = NULL;
    ck_assert_msg(text != NULL, "%s missing", p);
    int n = 0;
    for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        cJSON *j = cJSON_Parse(l);
        ck_assert_ptr_nonnull(j);
        const cJSON *v = cJSON_GetObjectItem(j, "val_loss");
        if (cJSON_IsNumber(v)) {
            if (!n++) *first = v->valuedouble;
            *last = v->valuedouble;
        }
        cJSON_Delete(j);
    }
    free(text);
    ck_assert_int_ge(n, 2);
}

static bool exists(const gpt_run *r, const char *rel) {
    char p[256];
    snprintf(p, sizeof p, "%s/%s", r->dir, rel);
    return access(p, F_OK) == 0;
}

/* The three families from scratch; sample reads each out_dir. */
static const struct family_run {
    const char *flags, *dir, *config, *arch_line;
} RUNS[] = {
    {"--arch=llama3 --n_kv_head=2", "llama", "cfg.json", "llama3, "},
    {"--arch=qwen3 --n_kv_head=1 --head_dim=16 --tie_head --hf_names", "qwen", "config.json",
     "qwen3, "},
    {"--arch=qwen3 --n_kv_head=2 --n_expert=4 --n_expert_per_tok=2", "moe", "cfg.json",
     "qwen3, "},
};

START_TEST(test_family_from_scratch) {
    const struct family_run *f = &RUNS[_i];
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    char args[1024], rel[128];
    snprintf(args, sizeof args, "train " SMALL " %s --out_dir=%s", f->flags, f->dir);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s: %s", args, r.err);
    ck_assert_msg(strstr(r.out, f->arch_line) && strstr(r.out, "20 iterations from 0"), "%s",
                  r.out);
    double first, last;
    val_losses(&r, f->dir, &first, &last);
    ck_assert_msg(last < first - 0.5, "%s: val loss %g -> %g", f->dir, first, last);
    snprintf(rel, sizeof rel, "%s/%s", f->dir, f->config);
    ck_assert_msg(exists(&r, rel), "no %s", rel);
    /* the model directory reads back through the library: the same config */
    nb_ctx *ctx = nb_ctx_new(0);
    nb_gpt m;
    char p[256];
    snprintf(p, sizeof p, "%s/%s/model.safetensors", r.dir, f->dir);
    ck_assert_msg(nb_gpt_load(ctx, &m, p, 0.0, NB_F32, NULL) == NB_OK, "%s", nb_ctx_error(ctx));
    ck_assert_int_eq(m.cfg.arch, _i == 0 ? NB_GPT_LLAMA3 : NB_GPT_QWEN3);
    ck_assert_int_eq(m.cfg.n_kv_head, _i == 1 ? 1 : 2);
    ck_assert_int_eq(m.cfg.head_dim, _i == 1 ? 16 : 8);
    ck_assert(m.cfg.tie_head == (_i == 1) && m.cfg.hf_names == (_i == 1));
    ck_assert_int_eq(m.cfg.n_expert, _i == 2 ? 4 : 0);
    if (_i == 1) ck_assert_ptr_nonnull(nb_list_get(&m.state_dict, "model.embed_tokens.weight"));
    else ck_assert_ptr_nonnull(nb_list_get(&m.state_dict, "tok_emb.weight"));
    nb_gpt_free(&m);
    nb_ctx_free(ctx);
    snprintf(args, sizeof args, "sample --out_dir=%s --num_samples=2 --max_new_tokens=20 "
             "--start=line", f->dir);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s: %s", args, r.err);
    ck_assert_msg(!strncmp(r.out, "line", 4) && strstr(r.out, "\n---------------\n"), "%s", r.out);
    /* bench times the same model: its FLOPs count the experts a token runs through */
    snprintf(args, sizeof args, "bench %s --n_layer=2 --n_head=4 --n_embd=32 --block_size=16 "
             "--batch_size=2 --max_iters=2 --rounds=1 --threads=1 --sample=False", f->flags);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s: %s", args, r.err);
    double gf = 0;
    const char *at = strstr(r.out, "gflop_per_step=");
    ck_assert_msg(at && sscanf(at, "gflop_per_step=%lf", &gf) == 1, "%s", r.out);
    /* 6 per matmul weight a token runs through (B T = 32: the blocks' matrices,
     * the router and 2 of 4 experts, the head of bench's vocabulary 65; the
     * norms' gains are not matmuls) plus 12 L B T^2 H hd */
    double w = _i == 0 ? 2 * (32 * 32 + 2 * 16 * 32 + 32 * 32 + 3 * 128 * 32.0)
             : _i == 1 ? 2 * (64 * 32 + 2 * 16 * 32 + 32 * 64 + 3 * 96 * 32.0)
                       : 2 * (32 * 32 + 2 * 16 * 32 + 32 * 32 + 4 * 32 + 2 * 3 * 48 * 32.0);
    w += 65 * 32; /* the head */
    double attn = 12.0 * 2 * 2 * 16 * 16 * (_i == 1 ? 64 : 32);
    ck_assert_msg(fabs(gf - (6 * w * 32 + attn) / 1e9) < 1e-5 * gf, "%s: %g vs %g", f->dir, gf,
                  (6 * w * 32 + attn) / 1e9);
    gpt_run_done(&r);
}
END_TEST

static void same_file(const gpt_run *r, const char *a, const char *b) {
    char pa[256], pb[256];
    snprintf(pa, sizeof pa, "%s/%s", r->dir, a);
    snprintf(pb, sizeof pb, "%s/%s", r->dir, b);
    size_t na, nb;
    char *x = nb_test_read(pa, &na), *y = nb_test_read(pb, &nb);
    ck_assert_msg(x && y, "%s or %s missing", pa, pb);
    ck_assert_msg(na == nb && !memcmp(x, y, na), "%s and %s differ", a, b);
    free(x), free(y);
}

/* Qwen3-MoE with dropout, interrupted at step 5 and resumed: the model and
 * the config are the uninterrupted run's bytes. */
START_TEST(test_family_resume_bit_identical) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    const char *q = "train " SMALL " --max_iters=12 --eval_interval=4 --dropout=0.1 "
                    "--arch=qwen3 --n_kv_head=2 --n_expert=4 --n_expert_per_tok=2 ";
    char args[1024];
    snprintf(args, sizeof args, "%s --out_dir=full", q);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    snprintf(args, sizeof args, "%s --out_dir=cut", q);
    gpt_exec_env(&r, "NB_GPT_TEST_SIGNAL=5", args);
    ck_assert_msg(r.status == 130, "exit %d: %s", r.status, r.err);
    gpt_exec(&r, "train --out_dir=cut --resume --threads=1");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "qwen3, ") && strstr(r.out, "12 iterations from "), "%s", r.out);
    same_file(&r, "full/model.safetensors", "cut/model.safetensors");
    same_file(&r, "full/cfg.json", "cut/cfg.json");
    /* the checkpoint fixes the family */
    gpt_exec(&r, "train --out_dir=cut --resume --max_iters=16 --n_expert=8");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--n_expert=8 contradicts the checkpoint"), "%s", r.err);
    gpt_run_done(&r);
}
END_TEST

/* ids 0..vocab-1 as nanoGPT's train.bin / val.bin in dir ds. */
static void write_ids(const gpt_run *r, int vocab) {
    char p[256];
    snprintf(p, sizeof p, "%s/ds", r->dir);
    ck_assert_int_eq(mkdir(p, 0777), 0);
    uint16_t ids[600];
    for (int i = 0; i < 600; i++) ids[i] = (uint16_t)((i * 7 + i / 5) % vocab);
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/ds/%s", r->dir, k ? "val.bin" : "train.bin");
        FILE *f = fopen(p, "wb");
        ck_assert_ptr_nonnull(f);
        fwrite(ids + (k ? 500 : 0), 2, k ? 100 : 500, f);
        fclose(f);
    }
}

/* init writes a model directory; train --init_from fine-tunes it; the
 * weights it starts from are the directory's. */
START_TEST(test_family_init_and_finetune) {
    gpt_run r;
    gpt_run_init(&r);
    write_ids(&r, 300);
    gpt_exec(&r, "init --arch=llama3 --n_layer=2 --n_head=4 --n_kv_head=2 --n_embd=32 "
                 "--block_size=32 --vocab_size=300 --tie_head --out=hfl");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "wrote hfl/model.safetensors and hfl/config.json: llama3, 2 "
                         "layers, 4 heads, n_embd 32, vocab 300"), "%s", r.out);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor_list sd = {0};
    char p[256];
    snprintf(p, sizeof p, "%s/hfl/model.safetensors", r.dir);
    ck_assert_int_eq(nb_load_safetensors(ctx, p, &sd), NB_OK);
    const nb_tensor *k = nb_list_get(&sd, "model.layers.1.self_attn.k_proj.weight");
    ck_assert(k && k->shape[0] == 16 && k->shape[1] == 32); /* 2 kv heads of 8 */
    ck_assert_ptr_null(nb_list_get(&sd, "lm_head.weight"));  /* tied: stored once */
    nb_list_free(&sd);
    gpt_exec(&r, "train --init_from=hfl/model.safetensors --dataset=ds --out_dir=ft "
                 "--block_size=16 --batch_size=4 --max_iters=6 --eval_interval=6 --eval_iters=1 "
                 "--warmup_iters=0 --learning_rate=3e-3 --threads=1");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "llama3, ") && strstr(r.out, "vocab 300"), "%s", r.out);
    ck_assert(exists(&r, "ft/config.json"));
    /* the fine-tune's step-0 evaluation is the initial model's: the same
     * loss from a --max_iters=0 run on the same init */
    double first, last;
    val_losses(&r, "ft", &first, &last);
    ck_assert_msg(last < first, "val loss %g -> %g", first, last);
    ck_assert_double_gt(first, 5.0); /* ~ln(300) = 5.7 for a random init */
    /* the course's layout, cfg.json, fine-tunes the same way */
    gpt_exec(&r, "init --arch=qwen3 --hf_names=False --n_layer=1 --n_head=2 --n_embd=16 "
                 "--head_dim=16 --block_size=16 --vocab_size=300 --out=course");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert(exists(&r, "course/cfg.json") && !exists(&r, "course/config.json"));
    gpt_exec(&r, "train --init_from=course/model.safetensors --dataset=ds --out_dir=ft2 "
                 "--block_size=16 --batch_size=2 --max_iters=2 --eval_interval=2 --eval_iters=1 "
                 "--threads=1");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert(exists(&r, "ft2/cfg.json"));
    nb_ctx_free(ctx);
    gpt_run_done(&r);
}
END_TEST

/* --batches (fixed batches, no text) and the NaN stop, for a Llama 3: the
 * same paths as the GPT's, only the model differs. */
START_TEST(test_family_batches_and_nan) {
    gpt_run r;
    gpt_run_init(&r);
    nb_ctx *ctx = nb_ctx_new(0);
    nb_tensor *x = nb_empty(ctx, NB_I64, NB_SHAPE(3, 2, 8));
    nb_tensor *y = nb_empty(ctx, NB_I64, NB_SHAPE(3, 2, 8));
    for (int i = 0; i < 48; i++)
        ((int64_t *)x->data)[i] = i % 13, ((int64_t *)y->data)[i] = (i + 1) % 13;
    nb_tensor_list b = {0};
    nb_list_add(&b, "x", x);
    nb_list_add(&b, "y", y);
    char p[256];
    snprintf(p, sizeof p, "%s/b.safetensors", r.dir);
    ck_assert_int_eq(nb_save_safetensors(ctx, p, &b, 0, NULL, NULL), NB_OK);
    const char *m = "--arch=llama3 --n_kv_head=1 --n_layer=1 --n_head=2 --n_embd=16 "
                    "--block_size=8 --batch_size=2 --vocab_size=13 --threads=1";
    char args[1024];
    snprintf(args, sizeof args, "train %s --batches=b.safetensors --out_dir=o", m);
    gpt_exec(&r, args);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "llama3, ") && strstr(r.out, "3 iterations from 0"), "%s", r.out);
    ck_assert(exists(&r, "o/cfg.json"));
    /* a learning rate that overflows: the run stops at the first non-finite loss */
    snprintf(args, sizeof args, "train %s --batches=b.safetensors --out_dir=nan "
             "--learning_rate=1e30 --decay_lr=False --grad_clip=0", m);
    gpt_exec(&r, args);
    ck_assert_msg(r.status != 0 && strstr(r.err, "not finite"), "exit %d: %s", r.status, r.err);
    nb_list_free(&b);
    nb_ctx_free(ctx);
    gpt_run_done(&r);
}
END_TEST

/* Flags that cannot make a model: exit 2 naming the flag, nothing written. */
static const struct bad_flags {
    const char *args, *msg;
    bool train_only; /* init writes Hugging Face's names by default, where it is fine */
} BAD[] = {
    {"--arch=llama3 --n_kv_head=3", "--n_head=4 is not a multiple of --n_kv_head=3", false},
    {"--arch=qwen3 --head_dim=7", "--head_dim=7 is odd", false},
    {"--arch=qwen3 --n_expert=4 --n_expert_per_tok=5",
     "--n_expert_per_tok=5 is more than --n_expert=4", false},
    {"--arch=qwen3 --window=0", "--window=0 must be positive", false},
    {"--arch=llama3 --n_expert=4", "experts are Qwen3-MoE's", false},
    {"--arch=llama3 --qk_norm", "Llama 3 has no QK-norm", false},
    {"--arch=gptmodel --n_kv_head=2", "--n_kv_head goes with --arch=llama3 or --arch=qwen3", false},
    {"--arch=mistral", "--arch: 'mistral' is not gptmodel, nanogpt, llama3 or qwen3", false},
    {"--arch=qwen3 --qk_norm=False --hf_names", "Hugging Face's Qwen3 always has it", false},
    {"--arch=llama3 --head_dim=16", "the course's Llama 3 has head_dim = n_embd / n_head", true},
};

START_TEST(test_family_bad_flags) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    char args[1024];
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        snprintf(args, sizeof args, "train " SMALL " %s --out_dir=o", BAD[i].args);
        gpt_exec(&r, args);
        ck_assert_msg(r.status == 2, "%s: exit %d", args, r.status);
        ck_assert_msg(strstr(r.err, BAD[i].msg), "%s: %s", args, r.err);
        ck_assert_msg(!exists(&r, "o"), "%s wrote o/", args);
        if (BAD[i].train_only) continue;
        snprintf(args, sizeof args, "init %s --n_layer=1 --n_head=4 --n_embd=32 --out=i",
                 BAD[i].args);
        gpt_exec(&r, args);
        ck_assert_msg(r.status == 2 && !exists(&r, "i"), "%s: exit %d", args, r.status);
    }
    /* a config file sets them too, as nanoGPT's config files do */
    char p[256];
    snprintf(p, sizeof p, "%s/cfg.py", r.dir);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs("arch = 'qwen3'\nn_kv_head = 3\n", f);
    fclose(f);
    gpt_exec(&r, "train cfg.py --n_head=4 --n_embd=32 --data=text.txt --out_dir=o");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--n_head=4 is not a multiple of --n_kv_head=3"), "%s", r.err);
    ck_assert(!exists(&r, "o"));
    gpt_run_done(&r);
}
END_TEST

/* A model directory whose config contradicts its tensors, or has a bad key:
 * exit 2 naming the tensor or the key, nothing written. */
START_TEST(test_family_bad_config) {
    gpt_run r;
    gpt_run_init(&r);
    write_ids(&r, 100);
    gpt_exec(&r, "init --arch=qwen3 --n_layer=1 --n_head=4 --n_kv_head=2 --n_embd=32 "
                 "--block_size=16 --vocab_size=100 --out=m");
    ck_assert_msg(r.status == 0, "%s", r.err);
    char p[256], *text;
    snprintf(p, sizeof p, "%s/m/config.json", r.dir);
    text = nb_test_read(p, NULL);
    ck_assert_ptr_nonnull(text);
    static const struct { const char *from, *to, *msg; } EDITS[] = {
        {"\"num_key_value_heads\":\t2", "\"num_key_value_heads\":\t4",
         "model.layers.0.self_attn.k_proj.weight is (16, 32); "},
        {"\"num_key_value_heads\":\t2", "\"num_key_value_heads\":\t3",
         "num_attention_heads 4 is not a multiple of num_key_value_heads 3"},
        {"\"hidden_size\":\t32", "\"hidden_size\":\t\"32\"", "\"hidden_size\" is \"32\""},
        {"\"model_type\":\t\"qwen3\"", "\"model_type\":\t\"qwen2\"",
         "model_type \"qwen2\" is not supported"},
        {"\"vocab_size\":\t100,", "", "\"vocab_size\" is missing"},
    };
    for (size_t i = 0; i < sizeof EDITS / sizeof *EDITS; i++) {
        char *at = strstr(text, EDITS[i].from);
        ck_assert_msg(at != NULL, "%s not in\n%s", EDITS[i].from, text);
        FILE *f = fopen(p, "w");
        ck_assert_ptr_nonnull(f);
        fwrite(text, 1, (size_t)(at - text), f);
        fputs(EDITS[i].to, f);
        fputs(at + strlen(EDITS[i].from), f);
        fclose(f);
        gpt_exec(&r, "train --init_from=m/model.safetensors --dataset=ds --out_dir=o "
                     "--max_iters=2 --block_size=16");
        ck_assert_msg(r.status == 2, "edit %zu: exit %d: %s", i, r.status, r.err);
        ck_assert_msg(strstr(r.err, EDITS[i].msg), "edit %zu: %s", i, r.err);
        ck_assert_msg(strstr(r.err, "m/config.json") || strstr(r.err, "m/model.safetensors"),
                      "%s", r.err);
        ck_assert(!exists(&r, "o"));
    }
    free(text);
    gpt_run_done(&r);
}
END_TEST

/* docs/gpt.md's Llama 3 and Qwen3 commands, as written there: a Llama 3
 * from scratch and a sample from it, a Qwen3-MoE under Hugging Face's names,
 * then GPT-2's tokens, an init'd Qwen3 and its fine-tune. */
START_TEST(test_family_docs_commands) {
    gpt_run r;
    gpt_run_init(&r);
    static char cmds[16][1024];
    int n = gpt_doc_commands("<!-- tests/check_gpt_family_tool.c runs the commands of the next "
                             "block -->", cmds, 16);
    ck_assert_int_eq(n, 7);
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
            bool threads = strstr(cmds[i], " train ") || strstr(cmds[i], " sample ");
            snprintf(cmd, sizeof cmd, "cd '%s' && '%s'%s%s 2>&1", r.dir, prog,
                     cmds[i] + strlen(bin), threads ? " --threads=1" : "");
        }
        int st = nb_test_run(cmd, &out);
        ck_assert_msg(st == 0, "%s: exit %d: %s", cmds[i], st, out);
        if (i == 1) ck_assert_msg(strstr(out, "llama3, ") && strstr(out, "step 20: "), "%s", out);
        if (i == 2) ck_assert_msg(!strncmp(out, "First Citizen:", 14), "%s", out);
        if (i == 3) ck_assert_msg(strstr(out, "qwen3, ") && strstr(out, "step 20: "), "%s", out);
        if (i == 5) ck_assert_msg(strstr(out, "wrote qwen3-tiny/model.safetensors and "
                                         "qwen3-tiny/config.json: qwen3"), "%s", out);
        if (i == 6) ck_assert_msg(strstr(out, "vocab 50257, 10 iterations") &&
                                  strstr(out, "step 10: train loss "), "%s", out);
        free(out);
    }
    char text[4096];
    char p[256];
    snprintf(p, sizeof p, "%s/out-moe/config.json", r.dir);
    nb_test_read_text(p, text, sizeof text);
    ck_assert_msg(strstr(text, "\"Qwen3MoeForCausalLM\""), "%s", text);
    gpt_run_done(&r);
}
END_TEST

/* The activation line of rec named "SCOPE OP #..." (tape index aside), or NULL. */
static const cJSON *act_line(const cJSON *rec, const char *scope, const char *op) {
    char want[160];
    snprintf(want, sizeof want, "%s %s #", scope, op);
    const cJSON *a;
    cJSON_ArrayForEach(a, cJSON_GetObjectItem(rec, "activations")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(a, "name"));
        if (name && !strncmp(name, want, strlen(want))) return a;
    }
    return NULL;
}

/* The line must be there, of its kind; an activation's saturation a share,
 * a norm's or a gated product's null. */
static void want_line(const cJSON *rec, const char *scope, const char *op, const char *kind) {
    const cJSON *a = act_line(rec, scope, op);
    ck_assert_msg(a != NULL, "no line '%s %s'", scope, op);
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(a, "kind")), kind);
    const cJSON *sat = cJSON_GetObjectItem(a, "saturated");
    if (!strcmp(kind, "activation"))
        ck_assert_msg(cJSON_IsNumber(sat) && sat->valuedouble >= 0 && sat->valuedouble <= 100,
                      "%s %s: saturated not a share", scope, op);
    else
        ck_assert_msg(cJSON_IsNull(sat), "%s %s: saturated not null", scope, op);
    ck_assert_msg(cJSON_GetNumberValue(cJSON_GetObjectItem(a, "std")) > 0, "%s %s: std 0", scope,
                  op);
}

/* --diagnostics on the new families: a line per layer for each RMSNorm
 * (the blocks', QK-norm's, the final one), the gated MLP's SiLU and its
 * product, and in Qwen3-MoE each expert that ran, named by its module
 * (model.layers.N.mlp.experts.E); the page is written beside. */
START_TEST(test_family_diagnostics) {
    gpt_run r;
    gpt_run_init(&r);
    gpt_write_corpus(r.dir);
    const char *runs[] = {
        "--arch=qwen3 --n_kv_head=2 --n_expert=4 --n_expert_per_tok=2 --hf_names",
        "--arch=llama3 --n_kv_head=2",
    };
    for (int k = 0; k < 2; k++) {
        char args[1024], p[256], page[16];
        snprintf(args, sizeof args, "train " SMALL " %s --max_iters=4 --out_dir=o%d "
                 "--diagnostics=d%d.html", runs[k], k, k);
        gpt_exec(&r, args);
        ck_assert_msg(r.status == 0, "%s: %s", args, r.err);
        snprintf(page, sizeof page, "d%d.html", k);
        ck_assert_msg(exists(&r, page), "no %s", page);
        snprintf(p, sizeof p, "%s/d%d.html.jsonl", r.dir, k);
        char *text = nb_test_read(p, NULL), *save = NULL;
        ck_assert_msg(text != NULL, "%s missing", p);
        cJSON *last = NULL; /* the last record with activations */
        for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
            cJSON *j = cJSON_Parse(l);
            ck_assert_ptr_nonnull(j);
            if (cJSON_GetObjectItem(j, "activations")) cJSON_Delete(last), last = j;
            else cJSON_Delete(j);
        }
        free(text);
        ck_assert_ptr_nonnull(last);
        int lines = cJSON_GetArraySize(cJSON_GetObjectItem(last, "activations")), experts = 0;
        for (int l = 0; l < 2; l++) {
            char b[64], sc[128];
            if (k == 0) {
                snprintf(b, sizeof b, "model.layers.%d", l);
                const char *norms[] = {"input_layernorm", "self_attn.q_norm", "self_attn.k_norm",
                                       "post_attention_layernorm"};
                for (int n = 0; n < 4; n++) {
                    snprintf(sc, sizeof sc, "%s.%s", b, norms[n]);
                    want_line(last, sc, "rms_norm", "norm");
                }
                for (int e = 0; e < 4; e++) { /* an expert no token chose has no lines */
                    snprintf(sc, sizeof sc, "%s.mlp.experts.%d", b, e);
                    if (!act_line(last, sc, "silu")) continue;
                    want_line(last, sc, "silu", "activation");
                    want_line(last, sc, "mul", "gated");
                    experts++;
                }
            } else {
                snprintf(b, sizeof b, "trf_blocks.%d", l);
                snprintf(sc, sizeof sc, "%s.norm1", b), want_line(last, sc, "rms_norm", "norm");
                snprintf(sc, sizeof sc, "%s.norm2", b), want_line(last, sc, "rms_norm", "norm");
                snprintf(sc, sizeof sc, "%s.ff", b);
                want_line(last, sc, "silu", "activation");
                want_line(last, sc, "mul", "gated");
            }
        }
        want_line(last, k == 0 ? "model.norm" : "final_norm", "rms_norm", "norm");
        /* nothing else: the norms, and a SiLU and its product per MLP or expert */
        if (k == 0) {
            ck_assert_int_ge(experts, 2 * 2); /* 64 tokens top-2: at least 2 experts a layer */
            ck_assert_int_eq(lines, 2 * 4 + 2 * experts + 1);
        } else {
            ck_assert_int_eq(lines, 2 * 4 + 1);
        }
        cJSON_Delete(last);
    }
    gpt_run_done(&r);
}
END_TEST

Suite *suite_gpt_family_tool(void) {
    Suite *s = suite_create("gpt_family_tool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_family_from_scratch, 0, 3);
    tcase_add_test(tc, test_family_resume_bit_identical);
    tcase_add_test(tc, test_family_init_and_finetune);
    tcase_add_test(tc, test_family_batches_and_nan);
    tcase_add_test(tc, test_family_bad_flags);
    tcase_add_test(tc, test_family_bad_config);
    tcase_add_test(tc, test_family_docs_commands);
    tcase_add_test(tc, test_family_diagnostics);
    suite_add_tcase(s, tc);
    return s;
}
