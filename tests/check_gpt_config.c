/* check_gpt_config.c - model directories: nb_gpt_config_read and
 * nb_gpt_config_write in both layouts (Hugging Face's config.json for
 * Llama, Qwen3, Qwen3-MoE and GPT-2; the course's cfg.json for Llama 3,
 * Qwen3 and GPTModel), and nb_gpt_load / nb_gpt_save of whole models:
 *   - every family and layout written, read back and equal, field by field;
 *   - a Llama 3.2-style config.json read to the values it gives;
 *   - each bad key refused with its name and the path, nothing written by
 *     a refused write;
 *   - models saved and loaded to the same bits, a tied head stored once,
 *     and files whose tensors contradict their config refused naming the
 *     tensor. */
#include "check_nabla.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

/* A fresh directory under /tmp (rmdir'd by rm_dir). */
static void mk_dir(char *dir) { ck_assert_ptr_nonnull(mkdtemp(dir)); }

static void rm_dir(const char *dir) {
    const char *names[] = {"config.json", "cfg.json", "model.safetensors"};
    char p[256];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        remove(p);
    }
    ck_assert_int_eq(rmdir(dir), 0); /* nothing else (no temporary) was left */
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* A small config of each family and layout. */
static nb_gpt_config family(int k) {
    nb_gpt_config c = nb_gpt_config_default(k < 3 ? NB_GPT_LLAMA3 : k < 8 ? NB_GPT_QWEN3
                                            : k == 8 ? NB_GPT_GPTMODEL : NB_GPT_NANOGPT);
    c.vocab_size = 97, c.block_size = 32, c.n_layer = 2, c.n_head = 4, c.n_embd = 32;
    c.dropout = 0, c.dtype = NB_F32, c.bias = false, c.qkv_bias = false;
    if (k >= 8) {
        c.qkv_bias = k == 8, c.bias = k == 9, c.dropout = k == 8 ? 0.25 : 0;
        c.hf_names = k == 9;
        return c;
    }
    c.n_kv_head = 2, c.head_dim = 8, c.hidden_dim = 48, c.rope_theta = 500000.0;
    c.norm_eps = k < 3 ? 1e-5 : 1e-6, c.qk_norm = k >= 3, c.hf_names = k % 2 == 0;
    c.tie_head = false, c.rope_scaled = false, c.n_expert = 0, c.window = 0;
    switch (k) {
    case 0: /* Llama 3.2's scaling, config.json */
    case 1: /* the same, the course's cfg */
        c.rope_scaled = true;
        c.rope_scaling = (nb_rope_scaling){32.0, 1.0, 4.0, 8192};
        break;
    case 2: c.n_kv_head = 1, c.tie_head = true, c.norm_eps = 2e-5, c.dtype = NB_F64; break;
    case 3: c.head_dim = 16, c.tie_head = true, c.rope_theta = 1e6; break; /* 4 x 16 on 32 */
    case 4: c.head_dim = 16, c.window = 5; break;
    case 5: /* Qwen3-MoE, the course's cfg */
    case 6: /* and config.json */
        c.n_expert = 4, c.n_expert_per_tok = 2, c.moe_hidden_dim = 24, c.hidden_dim = 0;
        c.hf_names = k == 6;
        break;
    case 7: c.qk_norm = false, c.hf_names = false, c.window = 3, c.norm_eps = 1e-5; break;
    }
    return c;
}
enum { N_FAMILIES = 10 };

/* The fields that mean something for c's family are equal. */
static void assert_same(const nb_gpt_config *a, const nb_gpt_config *b, int k) {
    ck_assert_msg(a->arch == b->arch, "family %d: arch %d, read %d", k, a->arch, b->arch);
    ck_assert(a->vocab_size == b->vocab_size && a->block_size == b->block_size);
    ck_assert(a->n_layer == b->n_layer && a->n_head == b->n_head && a->n_embd == b->n_embd);
    ck_assert(a->dtype == b->dtype || a->arch == NB_GPT_NANOGPT || a->arch == NB_GPT_GPTMODEL);
    if (a->arch == NB_GPT_GPTMODEL) {
        ck_assert(a->qkv_bias == b->qkv_bias && a->dropout == b->dropout && !b->hf_names);
        return;
    }
    if (a->arch == NB_GPT_NANOGPT) {
        ck_assert(b->bias && b->gelu == a->gelu); /* hf_names: only the file's */
        return;
    }
    ck_assert_int_eq(a->n_kv_head, b->n_kv_head);
    ck_assert_int_eq(a->head_dim, b->head_dim);
    ck_assert_int_eq(a->hidden_dim, b->hidden_dim);
    ck_assert_double_eq(a->norm_eps, b->norm_eps);
    ck_assert_double_eq(a->rope_theta, b->rope_theta);
    ck_assert(a->rope_scaled == b->rope_scaled && a->qk_norm == b->qk_norm);
    if (a->rope_scaled)
        ck_assert(!memcmp(&a->rope_scaling, &b->rope_scaling, sizeof a->rope_scaling));
    ck_assert(a->tie_head == b->tie_head && a->hf_names == b->hf_names);
    ck_assert(a->n_expert == b->n_expert && a->window == b->window);
    if (a->n_expert)
        ck_assert(a->n_expert_per_tok == b->n_expert_per_tok &&
                  a->moe_hidden_dim == b->moe_hidden_dim);
}

/* Each family written in its layout and read back the same. */
START_TEST(test_config_round_trip) {
    nb_ctx *ctx = nb_ctx_new(0);
    char dir[] = "/tmp/nb-cfg-XXXXXX", path[128];
    mk_dir(dir);
    nb_gpt_config a = family(_i), b;
    snprintf(path, sizeof path, "%s/%s", dir, a.hf_names || a.arch == NB_GPT_NANOGPT
                                                  ? "config.json" : "cfg.json");
    ck_assert_msg(nb_gpt_config_write(ctx, &a, path) == NB_OK, "%s", nb_ctx_error(ctx));
    memset(&b, 0xff, sizeof b);
    ck_assert_msg(nb_gpt_config_read(ctx, path, &b) == NB_OK, "family %d: %s", _i,
                  nb_ctx_error(ctx));
    assert_same(&a, &b, _i);
    ck_assert(a.arch != NB_GPT_NANOGPT || b.hf_names);
    /* the keys each layout is known by */
    char text[4096];
    nb_test_read_text(path, text, sizeof text);
    const char *key = a.arch == NB_GPT_NANOGPT ? "\"n_positions\":"
                      : a.hf_names ? "\"num_key_value_heads\":" : "\"emb_dim\":";
    ck_assert_msg(strstr(text, key), "family %d: no %s in\n%s", _i, key, text);
    if (a.arch == NB_GPT_QWEN3 && a.n_expert && a.hf_names)
        ck_assert(strstr(text, "\"Qwen3MoeForCausalLM\"") && strstr(text, "\"norm_topk_prob\":"));
    rm_dir(dir);
    nb_ctx_free(ctx);
}
END_TEST

/* Llama 3.2-1B's config.json (its sizes made small): every key it gives. */
START_TEST(test_config_read_llama) {
    nb_ctx *ctx = nb_ctx_new(0);
    char dir[] = "/tmp/nb-cfg-XXXXXX", path[128];
    mk_dir(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path,
               "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,\n"
               " \"bos_token_id\": 128000, \"head_dim\": 16, \"hidden_act\": \"silu\",\n"
               " \"hidden_size\": 64, \"intermediate_size\": 256,\n"
               " \"max_position_embeddings\": 131072, \"mlp_bias\": false,\n"
               " \"model_type\": \"llama\", \"num_attention_heads\": 4,\n"
               " \"num_hidden_layers\": 3, \"num_key_value_heads\": 2,\n"
               " \"rms_norm_eps\": 1e-05, \"rope_scaling\": {\"factor\": 32.0,\n"
               "  \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,\n"
               "  \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"},\n"
               " \"rope_theta\": 500000.0, \"tie_word_embeddings\": true,\n"
               " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 1000}\n");
    nb_gpt_config c;
    ck_assert_msg(nb_gpt_config_read(ctx, path, &c) == NB_OK, "%s", nb_ctx_error(ctx));
    ck_assert(c.arch == NB_GPT_LLAMA3 && c.hf_names && c.tie_head && !c.qk_norm);
    ck_assert(c.n_embd == 64 && c.n_head == 4 && c.n_kv_head == 2 && c.head_dim == 16);
    ck_assert(c.n_layer == 3 && c.hidden_dim == 256 && c.vocab_size == 1000);
    ck_assert(c.block_size == 131072 && c.dtype == NB_F32 && c.n_expert == 0);
    ck_assert_double_eq(c.norm_eps, 1e-5);
    ck_assert_double_eq(c.rope_theta, 500000.0);
    ck_assert(c.rope_scaled && c.rope_scaling.factor == 32.0 &&
              c.rope_scaling.low_freq_factor == 1.0 && c.rope_scaling.high_freq_factor == 4.0 &&
              c.rope_scaling.original_max_position_embeddings == 8192);
    /* a dense class reads no expert keys (transformers' dense classes ignore
     * them; found by fuzz_config_json: 8 experts with 0 a token was accepted) */
    write_text(path, "{\"model_type\": \"qwen3\", \"vocab_size\": 151, \"hidden_size\": 32,\n"
                     " \"intermediate_size\": 96, \"num_hidden_layers\": 2,\n"
                     " \"num_attention_heads\": 4, \"num_key_value_heads\": 1,\n"
                     " \"max_position_embeddings\": 64, \"num_experts\": 8,\n"
                     " \"num_experts_per_tok\": \"two\", \"moe_intermediate_size\": 24}\n");
    ck_assert_msg(nb_gpt_config_read(ctx, path, &c) == NB_OK, "%s", nb_ctx_error(ctx));
    ck_assert(c.arch == NB_GPT_QWEN3 && c.hidden_dim == 96 && c.n_expert == 0 &&
              c.n_expert_per_tok == 0 && c.moe_hidden_dim == 0);
    rm_dir(dir);
    nb_ctx_free(ctx);
}
END_TEST

/* Bad configs: the status and a part of the message (the key, the path). */
static const struct bad_cfg {
    const char *text;
    nb_status st;
    const char *msg;
} BAD[] = {
#define LL "\"model_type\": \"llama\", \"vocab_size\": 10, \"max_position_embeddings\": 8, "
#define LS LL "\"num_hidden_layers\": 1, \"intermediate_size\": 8, "
#define QM "\"model_type\": \"qwen3_moe\", \"vocab_size\": 10, \"max_position_embeddings\": 8, " \
           "\"num_hidden_layers\": 1, \"hidden_size\": 8, \"num_attention_heads\": 2, "       \
           "\"moe_intermediate_size\": 4, "
#define CQ "\"vocab_size\": 10, \"context_length\": 8, \"emb_dim\": 8, \"n_heads\": 2, "    \
           "\"n_layers\": 1, \"hidden_dim\": 8, \"n_kv_groups\": 1, \"rope_base\": 1e6, "
    {"{" LS "\"num_attention_heads\": 2}", NB_ERR_FORMAT, "\"hidden_size\" is missing"},
    {"{" LS "\"hidden_size\": 8, \"num_attention_heads\": \"two\"}", NB_ERR_FORMAT,
     "\"num_attention_heads\" is \"two\"; expected an integer"},
    {"{" LS "\"hidden_size\": 8.5, \"num_attention_heads\": 2}", NB_ERR_FORMAT,
     "\"hidden_size\" is 8.5"},
    {"{\"model_type\": \"mistral\"}", NB_ERR_VALUE, "model_type \"mistral\" is not supported"},
    {"{\"architectures\": [\"MistralForCausalLM\"]}", NB_ERR_VALUE,
     "architectures \"MistralForCausalLM\" is not supported"},
    {"{\"vocab_size\": 10}", NB_ERR_FORMAT, "\"model_type\" (config.json) or \"emb_dim\""},
    {"{" LS "\"hidden_size\": 8, \"num_attention_heads\": 2, \"rope_scaling\": {\"rope_type\": "
     "\"yarn\", \"factor\": 4.0}}", NB_ERR_VALUE, "rope_type \"yarn\" is not supported"},
    {"{" LS "\"hidden_size\": 8, \"num_attention_heads\": 2, \"rope_scaling\": {\"rope_type\": "
     "\"llama3\", \"factor\": 4.0}}", NB_ERR_FORMAT, "\"low_freq_factor\" is missing"},
    {"{" LS "\"hidden_size\": 24, \"num_attention_heads\": 6, \"num_key_value_heads\": 4}",
     NB_ERR_VALUE, "num_attention_heads 6 is not a multiple of num_key_value_heads 4"},
    {"{" LS "\"hidden_size\": 8, \"num_attention_heads\": 2, \"head_dim\": 7}", NB_ERR_VALUE,
     "head_dim 7 is odd"},
    {"{" QM "\"num_experts\": 4, \"num_experts_per_tok\": 5, \"norm_topk_prob\": true}",
     NB_ERR_VALUE, "num_experts_per_tok 5 is more than num_experts 4"},
    {"{" QM "\"num_experts\": 4, \"num_experts_per_tok\": 2, \"norm_topk_prob\": false}",
     NB_ERR_VALUE, "norm_topk_prob false"},
    {"{" QM "\"num_experts\": 4, \"num_experts_per_tok\": 2}", NB_ERR_VALUE,
     "norm_topk_prob is missing"},
    {"{" QM "\"num_experts_per_tok\": 2, \"norm_topk_prob\": true}", NB_ERR_FORMAT,
     "\"num_experts\" is missing"},
    {"{\"model_type\": \"qwen3\", \"vocab_size\": 10, \"max_position_embeddings\": 8, "
     "\"num_hidden_layers\": 1, \"hidden_size\": 8, \"num_attention_heads\": 2, "
     "\"intermediate_size\": 8, \"use_sliding_window\": true, \"sliding_window\": 0}",
     NB_ERR_VALUE, "sliding_window 0 must be positive"},
    {"{" LS "\"hidden_size\": 8, \"num_attention_heads\": 2, \"hidden_act\": \"gelu\"}",
     NB_ERR_VALUE, "hidden_act \"gelu\" is not supported"},
    {"{" CQ "\"qk_norm\": \"yes\"}", NB_ERR_FORMAT, "\"qk_norm\" is \"yes\"; expected true"},
    {"{" CQ "\"qk_norm\": true, \"sliding_window\": -1}", NB_ERR_VALUE,
     "sliding_window -1 must be positive"},
    {"{" CQ "\"rope_freq\": null}", NB_ERR_FORMAT, ""}, /* Llama: emb_dim/n_heads 4 fine */
    {"{\"vocab_size\": 10, \"context_length\": 8, \"emb_dim\": 8, \"n_heads\": 2, "
     "\"n_layers\": 1, \"hidden_dim\": 8, \"rope_base\": 5e5, \"rope_freq\": null}",
     NB_ERR_FORMAT, "\"n_kv_groups\" is missing"},
    {"{\"vocab_size\": 10, \"context_length\": 8, \"emb_dim\": 8, \"n_heads\": 2, "
     "\"n_layers\": 1, \"qkv_bias\": false}", NB_ERR_FORMAT, "\"drop_rate\" is missing"},
    {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_head\": 2, \"n_embd\": 8}", NB_ERR_FORMAT,
     "\"n_positions\" is missing"},
    {"[1, 2]", NB_ERR_FORMAT, "not a JSON object"},
#undef LL
#undef LS
#undef QM
#undef CQ
};
enum { N_BAD = sizeof BAD / sizeof BAD[0] };

START_TEST(test_config_bad) {
    const struct bad_cfg *b = &BAD[_i];
    nb_ctx *ctx = nb_ctx_new(0);
    char dir[] = "/tmp/nb-cfg-XXXXXX", path[128];
    mk_dir(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, b->text);
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_NANOGPT), keep = c;
    nb_status st = nb_gpt_config_read(ctx, path, &c);
    if (!b->msg[0]) { /* a good one among the bad: the course's Llama 3 with rope_freq null */
        ck_assert_msg(st == NB_OK, "%s", nb_ctx_error(ctx));
        ck_assert(c.arch == NB_GPT_LLAMA3 && !c.rope_scaled && c.head_dim == 4);
    } else {
        ck_assert_msg(st == b->st, "case %d: status %d (%s)", _i, st, nb_ctx_error(ctx));
        ck_assert_error_has(ctx, b->msg);
        ck_assert_error_has(ctx, path);
        ck_assert(!memcmp(&c, &keep, sizeof c)); /* *out untouched */
    }
    rm_dir(dir);
    nb_ctx_free(ctx);
}
END_TEST

/* Configs a layout cannot express are refused by the writer, which then
 * leaves the old file as it was. */
START_TEST(test_config_write_refused) {
    nb_ctx *ctx = nb_ctx_new(0);
    char dir[] = "/tmp/nb-cfg-XXXXXX", path[128], text[256];
    mk_dir(dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    write_text(path, "old");
    nb_gpt_config c = family(0);
    c.qk_norm = true; /* Llama has no QK-norm */
    ck_assert_int_eq(nb_gpt_config_write(ctx, &c, path), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "gpt_config_write: qk_norm cannot be written in LlamaForCausalLM");
    nb_ctx_clear_error(ctx);
    c = family(4), c.qk_norm = false; /* HF's Qwen3 always has it */
    ck_assert_int_eq(nb_gpt_config_write(ctx, &c, path), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    c = family(1), c.head_dim = 16; /* the course's Llama 3 has no head_dim key */
    ck_assert_int_eq(nb_gpt_config_write(ctx, &c, path), NB_ERR_VALUE);
    ck_assert_error_has(ctx, "head_dim other than emb_dim / n_heads");
    nb_ctx_clear_error(ctx);
    c = family(9), c.bias = false;
    ck_assert_int_eq(nb_gpt_config_write(ctx, &c, path), NB_ERR_VALUE);
    nb_ctx_clear_error(ctx);
    nb_test_read_text(path, text, sizeof text);
    ck_assert_str_eq(text, "old");
    rm_dir(dir);
    nb_ctx_free(ctx);
}
END_TEST

/* A model saved and loaded back: the same names, the same bits. */
static void assert_same_model(const nb_gpt *a, const nb_gpt *b) {
    ck_assert_int_eq(a->state_dict.n, b->state_dict.n);
    for (int i = 0; i < a->state_dict.n; i++) {
        const nb_tensor *x = a->state_dict.t[i], *y = b->state_dict.t[i];
        ck_assert_str_eq(a->state_dict.names[i], b->state_dict.names[i]);
        ck_assert_uint_eq(x->numel, y->numel);
        ck_assert_msg(x->dtype == y->dtype &&
                      !memcmp(x->data, y->data, x->numel * nb_dtype_size(x->dtype)),
                      "%s differs", a->state_dict.names[i]);
    }
}

/* nb_gpt_save then nb_gpt_load for config `k` of family(): the config
 * file of its layout, every tensor once, the same model back. */
static void save_load(int k) {
    nb_ctx *p = nb_ctx_new(0), *files = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    nb_gpt_config c = family(k);
    nb_gpt a, b;
    ck_assert_msg(nb_gpt_init(p, &a, &c, &rng) == NB_OK, "family %d: %s", k, nb_ctx_error(p));
    char dir[] = "/tmp/nb-dir-XXXXXX", path[128], cpath[128];
    mk_dir(dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    ck_assert_msg(nb_gpt_save(p, &a, path) == NB_OK, "%s", nb_ctx_error(p));
    bool hf = c.arch == NB_GPT_NANOGPT || (c.hf_names && c.arch != NB_GPT_GPTMODEL);
    snprintf(cpath, sizeof cpath, "%s/%s", dir, hf ? "config.json" : "cfg.json");
    ck_assert_int_eq(access(cpath, F_OK), 0);
    nb_tensor_list raw = {0};
    ck_assert_int_eq(nb_load_safetensors(files, path, &raw), NB_OK);
    int unique = 0;
    for (int i = 0; i < a.state_dict.n; i++) {
        bool first = true;
        for (int j = 0; j < i; j++) first = first && a.state_dict.t[j] != a.state_dict.t[i];
        unique += first;
    }
    if (c.arch != NB_GPT_NANOGPT) ck_assert_int_eq(raw.n, unique); /* a tied head once */
    nb_list_free(&raw);
    ck_assert_msg(nb_gpt_load(p, &b, path, c.dropout, c.dtype, &rng) == NB_OK, "family %d: %s",
                  k, nb_ctx_error(p));
    assert_same(&a.cfg, &b.cfg, k);
    assert_same_model(&a, &b);
    nb_gpt_free(&a);
    nb_gpt_free(&b);
    rm_dir(dir);
    nb_ctx_free(files);
    nb_ctx_free(p);
}

/* Llama 3, Qwen3 and Qwen3-MoE in both layouts, a tied head among them. */
START_TEST(test_save_load_family) { save_load(_i); }
END_TEST

START_TEST(test_save_load_gpt2) {
    save_load(8); /* the course's GPTModel, cfg.json */
    save_load(9); /* GPT-2's Hugging Face files */
}
END_TEST

/* Files that contradict their config: refused before a model is built,
 * naming the tensor; a missing config; a stale config.json beside a
 * course-layout save. */
START_TEST(test_load_contradicts) {
    nb_ctx *p = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 7, 1);
    nb_gpt_config c = family(8);
    nb_gpt a, b;
    ck_assert_int_eq(nb_gpt_init(p, &a, &c, &rng), NB_OK);
    char dir[] = "/tmp/nb-dir-XXXXXX", path[128], cpath[128];
    mk_dir(dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(cpath, sizeof cpath, "%s/cfg.json", dir);
    ck_assert_msg(nb_gpt_save(p, &a, path) == NB_OK, "%s", nb_ctx_error(p));
    /* a wider model in the config than in the file */
    nb_gpt_config wide = c;
    wide.n_embd = 48, wide.n_head = 4;
    ck_assert_int_eq(nb_gpt_config_write(p, &wide, cpath), NB_OK);
    ck_assert_int_eq(nb_gpt_load(p, &b, path, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "gpt_load: ");
    ck_assert_error_has(p, "tok_emb.weight is (97, 32)");
    ck_assert_error_has(p, "gives (97, 48)");
    nb_ctx_clear_error(p);
    /* fewer layers in the config: the file's extra block is not the model's */
    nb_gpt_config shallow = c;
    shallow.n_layer = 1;
    ck_assert_int_eq(nb_gpt_config_write(p, &shallow, cpath), NB_OK);
    ck_assert_int_eq(nb_gpt_load(p, &b, path, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "trf_blocks.1.");
    ck_assert_error_has(p, "is not a tensor of the model");
    nb_ctx_clear_error(p);
    /* more layers: one is missing */
    nb_gpt_config deep = c;
    deep.n_layer = 3;
    ck_assert_int_eq(nb_gpt_config_write(p, &deep, cpath), NB_OK);
    ck_assert_int_eq(nb_gpt_load(p, &b, path, 0.0, NB_F32, NULL), NB_ERR_FORMAT);
    ck_assert_error_has(p, "trf_blocks.2.");
    ck_assert_error_has(p, "is missing");
    nb_ctx_clear_error(p);
    /* no config at all */
    ck_assert_int_eq(remove(cpath), 0);
    ck_assert_int_eq(nb_gpt_load(p, &b, path, 0.0, NB_F32, NULL), NB_ERR_IO);
    ck_assert_error_has(p, "neither config.json nor cfg.json is beside it");
    nb_ctx_clear_error(p);
    /* a config.json beside would be read first: the course's save refuses */
    char other[128];
    snprintf(other, sizeof other, "%s/config.json", dir);
    write_text(other, "{}");
    ck_assert_int_eq(nb_gpt_save(p, &a, path), NB_ERR_VALUE);
    ck_assert_error_has(p, "would be read before");
    ck_assert_int_eq(access(cpath, F_OK), -1); /* nothing written */
    nb_ctx_clear_error(p);
    nb_gpt_free(&a);
    rm_dir(dir);
    nb_ctx_free(p);
}
END_TEST

/* NULL arguments: NB_ERR_NULL naming the argument; a NULL or failed
 * context: nothing done. */
START_TEST(test_config_nulls) {
    nb_ctx *p = nb_ctx_new(0);
    nb_gpt_config c = family(0);
    nb_gpt m;
    memset(&m, 0, sizeof m);
    ck_assert_int_eq(nb_gpt_config_read(NULL, "x", &c), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_config_write(NULL, &c, "x"), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_load(NULL, &m, "x", 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_save(NULL, &m, "x"), NB_ERR_NULL);
    ck_assert_int_eq(nb_gpt_config_read(p, NULL, &c), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_config_read: path is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_read(p, "x", NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_config_read: out is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_write(p, NULL, "x"), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_config_write: cfg is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_write(p, &c, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_config_write: path is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_load(p, NULL, "x", 0.0, NB_F32, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_load: model is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_save(p, &m, NULL), NB_ERR_NULL);
    ck_assert_error_has(p, "gpt_save: path is NULL");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_save(p, &m, "x"), NB_ERR_VALUE); /* never built */
    ck_assert_error_has(p, "gpt_save: the model is not built");
    nb_ctx_clear_error(p);
    ck_assert_int_eq(nb_gpt_config_read(p, "/nonexistent/config.json", &c), NB_ERR_IO);
    ck_assert_error_has(p, "gpt_config_read: /nonexistent/config.json");
    /* the context holds an error: nothing more is done or recorded */
    ck_assert_int_eq(nb_gpt_config_write(p, &c, "/tmp/never.json"), NB_ERR_IO);
    ck_assert_int_eq(access("/tmp/never.json", F_OK), -1);
    nb_ctx_free(p);
}
END_TEST

Suite *suite_gpt_config(void) {
    Suite *s = suite_create("gpt_config");
    TCase *tc = tcase_create("config");
    tcase_add_loop_test(tc, test_config_round_trip, 0, N_FAMILIES);
    tcase_add_test(tc, test_config_read_llama);
    tcase_add_loop_test(tc, test_config_bad, 0, N_BAD);
    tcase_add_test(tc, test_config_write_refused);
    tcase_add_test(tc, test_config_nulls);
    suite_add_tcase(s, tc);
    TCase *dir = tcase_create("dir");
    tcase_add_loop_test(dir, test_save_load_family, 0, 8);
    tcase_add_test(dir, test_save_load_gpt2);
    tcase_add_test(dir, test_load_contradicts);
    suite_add_tcase(s, dir);
    return s;
}
