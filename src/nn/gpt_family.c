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

const gpt_layout *nb_gpt_layout(const nb_gpt_config *cfg) {
    switch (cfg->arch) {
    case NB_GPT_GPTMODEL: return &GPTMODEL;
    case NB_GPT_NANOGPT: return &NANOGPT;
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
