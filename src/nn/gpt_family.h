/* gpt_family.h - each model family as data: the kinds of its parts (norm,
 * positions, attention, MLP), the module names the forward is scoped
 * under, and its parameters, one row each in state_dict order, with the
 * shape and the init of each. gpt.c's one init, one forward and one loader
 * walk these tables (gpt_family.c); a new family is a new table plus any
 * op it lacks. Internal to src/nn. */
#ifndef NB_GPT_FAMILY_H
#define NB_GPT_FAMILY_H

#include "ops/ops_internal.h"

#include <stddef.h>

typedef enum gpt_norm_kind { NORM_LAYER, NORM_RMS } gpt_norm_kind;
typedef enum gpt_pos_kind { POS_LEARNED, POS_ROPE } gpt_pos_kind;
typedef enum gpt_att_kind {
    ATT_MHA_MODULE, /* nabla's MultiHeadAttention module (the course's GPTModel) */
    ATT_FUSED_QKV,  /* one (3C, C) c_attn, split in q, k, v (nanoGPT) */
    ATT_GQA         /* Wq, Wk, Wv without bias, q/k norm, RoPE, GQA, window */
} gpt_att_kind;
typedef enum gpt_mlp_kind {
    MLP_GELU,  /* Linear(C, 4C), GELU, Linear(4C, C) */
    MLP_GATED  /* W3 (silu(h W1^T) * h W2^T); a mixture of them with n_expert > 0 */
} gpt_mlp_kind;

/* A size in the config's terms. */
typedef enum gpt_dim {
    D_NONE, /* the second dim of a 1-D parameter */
    D_V, D_C, D_BS, D_3C, D_4C,
    D_QH,   /* n_head * head_dim */
    D_KVH,  /* n_kv_head * head_dim */
    D_HD, D_HID, D_MOE, D_E
} gpt_dim;

/* How a parameter is drawn (in the table's order, from init's rng). */
typedef enum gpt_init {
    I_ONE, I_ZERO,
    I_N1,         /* N(0, 1): PyTorch's nn.Embedding */
    I_N02,        /* N(0, 0.02): nanoGPT's and Hugging Face's Linear and Embedding */
    I_N02_PROJ,   /* N(0, 0.02 / sqrt(2 n_layer)): nanoGPT's c_proj weights */
    I_UNIFORM,    /* U(-1/sqrt(fan), 1/sqrt(fan)): PyTorch's nn.Linear, weight and bias */
    I_MHA,        /* the course's MultiHeadAttention module, made by nb_nn_mha_init */
    I_TIED        /* the token embedding again: state_dict only, no draw */
} gpt_init;

/* When a row exists. */
typedef enum gpt_when { W_ALL, W_BIAS, W_QK_NORM, W_DENSE, W_MOE, W_UNTIED, W_TIED } gpt_when;

/* Where the tensor goes: a field of nb_gpt, of nb_gpt_block, or an array
 * of n_expert tensors in nb_gpt_block. */
typedef enum gpt_at { AT_MODEL, AT_BLOCK, AT_EXPERT } gpt_at;

typedef struct gpt_part {
    gpt_at at;
    size_t field;     /* offsetof in nb_gpt / nb_gpt_block (nb_tensor * or nb_tensor **) */
    const char *name; /* AT_MODEL: the full name; AT_BLOCK: after "<block>."; AT_EXPERT:
                         likewise with %d for the expert */
    gpt_dim d0, d1;
    gpt_init init;
    gpt_dim fan;      /* I_UNIFORM's fan-in */
    gpt_when when;
} gpt_part;

/* The names the forward's modules are scoped under (NB_NN_SCOPED: the tape
 * explorer and anomaly reports show them); NULL adds no scope. */
typedef struct gpt_scopes {
    const char *tok, *pos, *block; /* block: a format with the block index */
    const char *norm1, *att, *norm2, *mlp, *final_norm, *head;
    const char *q, *k, *v, *o, *q_norm, *k_norm; /* inside att (ATT_GQA; o also nanoGPT) */
    const char *fc, *act, *up, *proj;            /* inside mlp */
    const char *router, *experts;                /* MoE */
} gpt_scopes;

typedef struct gpt_layout {
    const char *label;          /* "GPTModel", "Llama 3 (Hugging Face names)", ... */
    gpt_norm_kind norm;
    gpt_pos_kind pos;
    gpt_att_kind att;
    gpt_mlp_kind mlp;
    bool gelu_from_cfg;         /* MLP_GELU: cfg.gelu, else always the tanh GELU */
    bool resid_dropout;         /* dropout on embeddings and both residual branches */
    bool experts_by_expert;     /* MoE rows: each expert's rows together (Hugging Face's
                                   ModuleList of experts), else each row over every expert
                                   (the course's fc1, fc2, fc3 ModuleLists) */
    const char *block_fmt;      /* "trf_blocks.%d" */
    const char *head_name;      /* the output head's state_dict name */
    const char *tok_name;       /* the token embedding's state_dict name */
    gpt_scopes s;
    const gpt_part *model_pre;  /* rows before the blocks */
    int n_model_pre;
    const gpt_part *block;      /* one block's rows */
    int n_block;
    const gpt_part *model_post; /* rows after the blocks */
    int n_model_post;
} gpt_layout;

/* The table of cfg's family and name layout (hf_names for Llama 3 and
 * Qwen3); NULL for an unknown arch. */
NB_HIDDEN const gpt_layout *nb_gpt_layout(const nb_gpt_config *cfg);

/* head_dim (0 means n_embd / n_head) and n_kv_head (0 means n_head) as
 * the model uses them; the GPT-2 families have n_embd / n_head and n_head. */
NB_HIDDEN int64_t nb_gpt_head_dim(const nb_gpt_config *cfg);
NB_HIDDEN int nb_gpt_kv_heads(const nb_gpt_config *cfg);

#endif
