/* nn/gpt_family.c - the model families' tables (gpt_family.h): per family
 * and name layout, the kinds of its parts, its module scopes and its
 * parameters in state_dict order (which is also the order init draws them). */
#include "gpt_family.h"

#define M(f) AT_MODEL, offsetof(nb_gpt, f)
#define B(f) AT_BLOCK, offsetof(nb_gpt_block, f)
#define N(rows) rows, (int)(sizeof rows / sizeof rows[0])

/* ---- GPT-2's block: the course's GPTModel ------------------------------------------- */

static const gpt_part GPTMODEL_PRE[] = {
    {M(wte), "tok_emb.weight", D_V, D_C, I_N1, D_NONE, W_ALL},
    {M(wpe), "pos_emb.weight", D_BS, D_C, I_N1, D_NONE, W_ALL},
};
static const gpt_part GPTMODEL_BLOCK[] = {
    {B(att), "att", D_NONE, D_NONE, I_MHA, D_NONE, W_ALL},
    {B(fc_w), "ff.layers.0.weight", D_4C, D_C, I_UNIFORM, D_C, W_ALL},
    {B(fc_b), "ff.layers.0.bias", D_4C, D_NONE, I_UNIFORM, D_C, W_ALL},
    {B(proj_w), "ff.layers.2.weight", D_C, D_4C, I_UNIFORM, D_4C, W_ALL},
    {B(proj_b), "ff.layers.2.bias", D_C, D_NONE, I_UNIFORM, D_4C, W_ALL},
    {B(ln1_w), "norm1.scale", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln1_b), "norm1.shift", D_C, D_NONE, I_ZERO, D_NONE, W_ALL},
    {B(ln2_w), "norm2.scale", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln2_b), "norm2.shift", D_C, D_NONE, I_ZERO, D_NONE, W_ALL},
};
static const gpt_part GPTMODEL_POST[] = {
    {M(lnf_w), "final_norm.scale", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {M(lnf_b), "final_norm.shift", D_C, D_NONE, I_ZERO, D_NONE, W_ALL},
    {M(head), "out_head.weight", D_V, D_C, I_UNIFORM, D_C, W_ALL},
};
static const gpt_layout GPTMODEL = {
    .label = "GPTModel", .norm = NORM_LAYER, .pos = POS_LEARNED, .att = ATT_MHA_MODULE,
    .mlp = MLP_GELU, .resid_dropout = true, .block_fmt = "trf_blocks.%d",
    .head_name = "out_head.weight", .tok_name = "tok_emb.weight",
    .s = {.tok = "tok_emb", .pos = "pos_emb", .block = "trf_blocks.%d", .norm1 = "norm1",
          .att = "att", .norm2 = "norm2", .mlp = "ff", .final_norm = "final_norm",
          .head = "out_head", .fc = "layers.0", .act = "layers.1", .proj = "layers.2"},
    .model_pre = N(GPTMODEL_PRE), .block = N(GPTMODEL_BLOCK), .model_post = N(GPTMODEL_POST),
};

/* ---- GPT-2's block: nanoGPT ------------------------------------------------------------ */

static const gpt_part NANOGPT_PRE[] = {
    {M(wte), "transformer.wte.weight", D_V, D_C, I_N02, D_NONE, W_ALL},
    {M(wpe), "transformer.wpe.weight", D_BS, D_C, I_N02, D_NONE, W_ALL},
};
static const gpt_part NANOGPT_BLOCK[] = {
    {B(ln1_w), "ln_1.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln1_b), "ln_1.bias", D_C, D_NONE, I_ZERO, D_NONE, W_BIAS},
    {B(c_attn_w), "attn.c_attn.weight", D_3C, D_C, I_N02, D_NONE, W_ALL},
    {B(c_attn_b), "attn.c_attn.bias", D_3C, D_NONE, I_ZERO, D_NONE, W_BIAS},
    {B(c_proj_w), "attn.c_proj.weight", D_C, D_C, I_N02_PROJ, D_NONE, W_ALL},
    {B(c_proj_b), "attn.c_proj.bias", D_C, D_NONE, I_ZERO, D_NONE, W_BIAS},
    {B(ln2_w), "ln_2.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln2_b), "ln_2.bias", D_C, D_NONE, I_ZERO, D_NONE, W_BIAS},
    {B(fc_w), "mlp.c_fc.weight", D_4C, D_C, I_N02, D_NONE, W_ALL},
    {B(fc_b), "mlp.c_fc.bias", D_4C, D_NONE, I_ZERO, D_NONE, W_BIAS},
    {B(proj_w), "mlp.c_proj.weight", D_C, D_4C, I_N02_PROJ, D_NONE, W_ALL},
    {B(proj_b), "mlp.c_proj.bias", D_C, D_NONE, I_ZERO, D_NONE, W_BIAS},
};
static const gpt_part NANOGPT_POST[] = {
    {M(lnf_w), "transformer.ln_f.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {M(lnf_b), "transformer.ln_f.bias", D_C, D_NONE, I_ZERO, D_NONE, W_BIAS},
    {M(head), "lm_head.weight", D_V, D_C, I_TIED, D_NONE, W_ALL},
};
static const gpt_layout NANOGPT = {
    .label = "nanoGPT", .norm = NORM_LAYER, .pos = POS_LEARNED, .att = ATT_FUSED_QKV,
    .mlp = MLP_GELU, .gelu_from_cfg = true, .resid_dropout = true,
    .block_fmt = "transformer.h.%d",
    .head_name = "lm_head.weight", .tok_name = "transformer.wte.weight",
    .s = {.tok = "transformer.wte", .pos = "transformer.wpe", .block = "transformer.h.%d",
          .norm1 = "ln_1", .att = "attn", .norm2 = "ln_2", .mlp = "mlp",
          .final_norm = "transformer.ln_f", .head = "lm_head", .o = "c_proj", .fc = "c_fc",
          .proj = "c_proj"},
    .model_pre = N(NANOGPT_PRE), .block = N(NANOGPT_BLOCK), .model_post = N(NANOGPT_POST),
};

/* ---- Llama 3 and Qwen3: the course's names (llama3.py, qwen3.py) ------------------
 * Rows in each module's registration order; PyTorch's default inits (the
 * course's models keep them): nn.Embedding N(0, 1), nn.Linear U(+-1/sqrt(in)),
 * norms 1. Llama 3's GroupedQueryAttention registers W_key and W_value before
 * W_query; Qwen3's W_query first, then q_norm and k_norm after out_proj. */

#define E(f) AT_EXPERT, offsetof(nb_gpt_block, f)

static const gpt_part COURSE_PRE[] = {
    {M(wte), "tok_emb.weight", D_V, D_C, I_N1, D_NONE, W_ALL},
};
static const gpt_part LLAMA3_COURSE_BLOCK[] = {
    {B(wk), "att.W_key.weight", D_KVH, D_C, I_UNIFORM, D_C, W_ALL},
    {B(wv), "att.W_value.weight", D_KVH, D_C, I_UNIFORM, D_C, W_ALL},
    {B(wq), "att.W_query.weight", D_QH, D_C, I_UNIFORM, D_C, W_ALL},
    {B(wo), "att.out_proj.weight", D_C, D_QH, I_UNIFORM, D_QH, W_ALL},
    {B(fc_w), "ff.fc1.weight", D_HID, D_C, I_UNIFORM, D_C, W_ALL},
    {B(up_w), "ff.fc2.weight", D_HID, D_C, I_UNIFORM, D_C, W_ALL},
    {B(proj_w), "ff.fc3.weight", D_C, D_HID, I_UNIFORM, D_HID, W_ALL},
    {B(ln1_w), "norm1.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln2_w), "norm2.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
};
static const gpt_part LLAMA3_COURSE_POST[] = {
    {M(lnf_w), "final_norm.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {M(head), "out_head.weight", D_V, D_C, I_UNIFORM, D_C, W_UNTIED},
    {M(head), "out_head.weight", D_V, D_C, I_TIED, D_NONE, W_TIED},
};
static const gpt_part QWEN3_COURSE_BLOCK[] = {
    {B(wq), "att.W_query.weight", D_QH, D_C, I_UNIFORM, D_C, W_ALL},
    {B(wk), "att.W_key.weight", D_KVH, D_C, I_UNIFORM, D_C, W_ALL},
    {B(wv), "att.W_value.weight", D_KVH, D_C, I_UNIFORM, D_C, W_ALL},
    {B(wo), "att.out_proj.weight", D_C, D_QH, I_UNIFORM, D_QH, W_ALL},
    {B(q_norm), "att.q_norm.scale", D_HD, D_NONE, I_ONE, D_NONE, W_QK_NORM},
    {B(k_norm), "att.k_norm.scale", D_HD, D_NONE, I_ONE, D_NONE, W_QK_NORM},
    {B(fc_w), "ff.fc1.weight", D_HID, D_C, I_UNIFORM, D_C, W_DENSE},
    {B(up_w), "ff.fc2.weight", D_HID, D_C, I_UNIFORM, D_C, W_DENSE},
    {B(proj_w), "ff.fc3.weight", D_C, D_HID, I_UNIFORM, D_HID, W_DENSE},
    {B(router), "ff.gate.weight", D_E, D_C, I_UNIFORM, D_C, W_MOE},
    {E(ex_gate), "ff.fc1.%d.weight", D_MOE, D_C, I_UNIFORM, D_C, W_MOE},
    {E(ex_up), "ff.fc2.%d.weight", D_MOE, D_C, I_UNIFORM, D_C, W_MOE},
    {E(ex_down), "ff.fc3.%d.weight", D_C, D_MOE, I_UNIFORM, D_MOE, W_MOE},
    {B(ln1_w), "norm1.scale", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln2_w), "norm2.scale", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
};
static const gpt_part QWEN3_COURSE_POST[] = {
    {M(lnf_w), "final_norm.scale", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {M(head), "out_head.weight", D_V, D_C, I_UNIFORM, D_C, W_UNTIED},
    {M(head), "out_head.weight", D_V, D_C, I_TIED, D_NONE, W_TIED},
};

#define COURSE_SCOPES                                                                      \
    .tok = "tok_emb", .block = "trf_blocks.%d", .norm1 = "norm1", .att = "att",            \
    .norm2 = "norm2", .mlp = "ff", .final_norm = "final_norm", .head = "out_head",         \
    .q = "W_query", .k = "W_key", .v = "W_value", .o = "out_proj", .q_norm = "q_norm",     \
    .k_norm = "k_norm", .fc = "fc1", .up = "fc2", .proj = "fc3", .router = "gate"

static const gpt_layout LLAMA3_COURSE = {
    .label = "Llama 3", .norm = NORM_RMS, .pos = POS_ROPE, .att = ATT_GQA, .mlp = MLP_GATED,
    .block_fmt = "trf_blocks.%d", .head_name = "out_head.weight", .tok_name = "tok_emb.weight",
    .s = {COURSE_SCOPES},
    .model_pre = N(COURSE_PRE), .block = N(LLAMA3_COURSE_BLOCK),
    .model_post = N(LLAMA3_COURSE_POST),
};
static const gpt_layout QWEN3_COURSE = {
    .label = "Qwen3", .norm = NORM_RMS, .pos = POS_ROPE, .att = ATT_GQA, .mlp = MLP_GATED,
    .block_fmt = "trf_blocks.%d", .head_name = "out_head.weight", .tok_name = "tok_emb.weight",
    .s = {COURSE_SCOPES},
    .model_pre = N(COURSE_PRE), .block = N(QWEN3_COURSE_BLOCK),
    .model_post = N(QWEN3_COURSE_POST),
};

/* ---- Llama 3 and Qwen3: Hugging Face's names (LlamaForCausalLM,
 * Qwen3ForCausalLM, Qwen3MoeForCausalLM) ----------------------------------------------
 * Hugging Face's _init_weights: every Linear and Embedding weight N(0, 0.02)
 * (initializer_range), norms 1. One table for both families: Llama 3 has no
 * qk_norm and no experts (the config checks refuse them). */

static const gpt_part HF_PRE[] = {
    {M(wte), "model.embed_tokens.weight", D_V, D_C, I_N02, D_NONE, W_ALL},
};
static const gpt_part HF_BLOCK[] = {
    {B(wq), "self_attn.q_proj.weight", D_QH, D_C, I_N02, D_NONE, W_ALL},
    {B(wk), "self_attn.k_proj.weight", D_KVH, D_C, I_N02, D_NONE, W_ALL},
    {B(wv), "self_attn.v_proj.weight", D_KVH, D_C, I_N02, D_NONE, W_ALL},
    {B(wo), "self_attn.o_proj.weight", D_C, D_QH, I_N02, D_NONE, W_ALL},
    {B(q_norm), "self_attn.q_norm.weight", D_HD, D_NONE, I_ONE, D_NONE, W_QK_NORM},
    {B(k_norm), "self_attn.k_norm.weight", D_HD, D_NONE, I_ONE, D_NONE, W_QK_NORM},
    {B(fc_w), "mlp.gate_proj.weight", D_HID, D_C, I_N02, D_NONE, W_DENSE},
    {B(up_w), "mlp.up_proj.weight", D_HID, D_C, I_N02, D_NONE, W_DENSE},
    {B(proj_w), "mlp.down_proj.weight", D_C, D_HID, I_N02, D_NONE, W_DENSE},
    {B(router), "mlp.gate.weight", D_E, D_C, I_N02, D_NONE, W_MOE},
    {E(ex_gate), "mlp.experts.%d.gate_proj.weight", D_MOE, D_C, I_N02, D_NONE, W_MOE},
    {E(ex_up), "mlp.experts.%d.up_proj.weight", D_MOE, D_C, I_N02, D_NONE, W_MOE},
    {E(ex_down), "mlp.experts.%d.down_proj.weight", D_C, D_MOE, I_N02, D_NONE, W_MOE},
    {B(ln1_w), "input_layernorm.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {B(ln2_w), "post_attention_layernorm.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
};
static const gpt_part HF_POST[] = {
    {M(lnf_w), "model.norm.weight", D_C, D_NONE, I_ONE, D_NONE, W_ALL},
    {M(head), "lm_head.weight", D_V, D_C, I_N02, D_NONE, W_UNTIED},
    {M(head), "lm_head.weight", D_V, D_C, I_TIED, D_NONE, W_TIED},
};

#define HF_SCOPES                                                                          \
    .tok = "model.embed_tokens", .block = "model.layers.%d", .norm1 = "input_layernorm",   \
    .att = "self_attn", .norm2 = "post_attention_layernorm", .mlp = "mlp",                 \
    .final_norm = "model.norm", .head = "lm_head", .q = "q_proj", .k = "k_proj",           \
    .v = "v_proj", .o = "o_proj", .q_norm = "q_norm", .k_norm = "k_norm",                  \
    .fc = "gate_proj", .up = "up_proj", .proj = "down_proj", .router = "gate",             \
    .experts = "experts"

static const gpt_layout LLAMA3_HF = {
    .label = "Llama 3 (Hugging Face names)", .norm = NORM_RMS, .pos = POS_ROPE,
    .att = ATT_GQA, .mlp = MLP_GATED, .experts_by_expert = true,
    .block_fmt = "model.layers.%d", .head_name = "lm_head.weight",
    .tok_name = "model.embed_tokens.weight", .s = {HF_SCOPES},
    .model_pre = N(HF_PRE), .block = N(HF_BLOCK), .model_post = N(HF_POST),
};
static const gpt_layout QWEN3_HF = {
    .label = "Qwen3 (Hugging Face names)", .norm = NORM_RMS, .pos = POS_ROPE,
    .att = ATT_GQA, .mlp = MLP_GATED, .experts_by_expert = true,
    .block_fmt = "model.layers.%d", .head_name = "lm_head.weight",
    .tok_name = "model.embed_tokens.weight", .s = {HF_SCOPES},
    .model_pre = N(HF_PRE), .block = N(HF_BLOCK), .model_post = N(HF_POST),
};

const gpt_layout *nb_gpt_layout(const nb_gpt_config *cfg) {
    switch (cfg->arch) {
    case NB_GPT_GPTMODEL: return &GPTMODEL;
    case NB_GPT_NANOGPT: return &NANOGPT;
    case NB_GPT_LLAMA3: return cfg->hf_names ? &LLAMA3_HF : &LLAMA3_COURSE;
    case NB_GPT_QWEN3: return cfg->hf_names ? &QWEN3_HF : &QWEN3_COURSE;
    default: return NULL;
    }
}

int64_t nb_gpt_head_dim(const nb_gpt_config *cfg) {
    if (cfg->arch == NB_GPT_GPTMODEL || cfg->arch == NB_GPT_NANOGPT || !cfg->head_dim)
        return cfg->n_head ? cfg->n_embd / cfg->n_head : 0;
    return cfg->head_dim;
}

int nb_gpt_kv_heads(const nb_gpt_config *cfg) {
    if (cfg->arch == NB_GPT_GPTMODEL || cfg->arch == NB_GPT_NANOGPT || !cfg->n_kv_head)
        return cfg->n_head;
    return cfg->n_kv_head;
}
