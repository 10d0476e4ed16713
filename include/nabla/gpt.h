/* nabla/gpt.h - a small GPT in two layouts: the course's GPTModel (the seed
 * notebooks' next chapter) and nanoGPT's GPT, as options of one model;
 * forward, loss, inference, a KV cache, sampling and the model summary.
 *
 *   nb_gpt_config cfg = nb_gpt_config_default(NB_GPT_NANOGPT);
 *   cfg.vocab_size = 65; cfg.block_size = 64; cfg.n_layer = 4; cfg.n_head = 4;
 *   cfg.n_embd = 128;
 *   nb_pcg32 rng;  nb_pcg32_seed(&rng, 1337, 1);
 *   nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
 *   nb_gpt gpt;
 *   if (nb_gpt_init(params, &gpt, &cfg, &rng)) fprintf(stderr, "%s\n", nb_ctx_error(params));
 *   nb_tensor *loss = nb_gpt_loss(step, &gpt, x, y, NULL);   // x, y I64 (B, T)
 *   nb_backward(step, loss, NULL);                          // grads in gpt.params
 *
 * The architecture (both layouts), for ids (B, T), T <= block_size, C = n_embd:
 *   x = tok_emb[ids] + pos_emb[0..T-1]; x = dropout(x)                (B, T, C)
 *   n_layer times (pre-LayerNorm block):
 *       x = x + dropout(attn(norm1(x)))     causal multi-head attention
 *       x = x + dropout(mlp(norm2(x)))      Linear(C, 4C), GELU, Linear(4C, C)
 *   logits = head(final_norm(x))                                       (B, T, V)
 *
 * NB_GPT_GPTMODEL, the course's GPTModel. state_dict names:
 *   tok_emb.weight (V, C), pos_emb.weight (block_size, C),
 *   trf_blocks.{i}.att.W_query.weight (C, C) [.bias with qkv_bias], W_key, W_value
 *     likewise, att.out_proj.weight (C, C), att.out_proj.bias (C),
 *   trf_blocks.{i}.ff.layers.0.weight (4C, C) / .bias, ff.layers.2.weight (C, 4C) / .bias,
 *   trf_blocks.{i}.norm1.scale / .shift (C), norm2 likewise,
 *   final_norm.scale / .shift, out_head.weight (V, C) (untied, no bias).
 *   Attention is nabla's MultiHeadAttention module (nb_nn_mha) unchanged,
 *   with attention-weight dropout; GELU is the tanh approximation; LayerNorm
 *   eps 1e-5, biased variance; dropout on the shortcut branch
 *   (drop_shortcut). `bias` is ignored: every Linear but W_query/W_key/
 *   W_value (qkv_bias) and out_head has one, every LayerNorm has a shift.
 *   Init: PyTorch's defaults (Embedding N(0, 1); Linear weight and bias
 *   U(-1/sqrt(in), 1/sqrt(in)); LayerNorm scale 1, shift 0), drawn in
 *   construction order: tok_emb, pos_emb, then per block att (W_query,
 *   W_key, W_value, out_proj), ff.layers.0, ff.layers.2, then out_head.
 *
 * NB_GPT_NANOGPT, nanoGPT's GPT. state_dict names:
 *   transformer.wte.weight (V, C), transformer.wpe.weight (block_size, C),
 *   transformer.h.{i}.ln_1.weight [.bias], .attn.c_attn.weight (3C, C) [.bias],
 *   .attn.c_proj.weight (C, C) [.bias], .ln_2.weight [.bias],
 *   .mlp.c_fc.weight (4C, C) [.bias], .mlp.c_proj.weight (C, 4C) [.bias],
 *   transformer.ln_f.weight [.bias], lm_head.weight (V, C).
 *   Biases ([...]) exist only with cfg.bias; qkv_bias is ignored. c_attn's
 *   output is split into q, k, v (in that order); attention dropout then
 *   resid_dropout after c_proj and after the MLP; GELU is exact (erf) by
 *   default, GPT-2's tanh approximation with cfg.gelu = NB_GELU_TANH.
 *   lm_head is TIED to wte: one tensor, listed once in `params` (as
 *   transformer.wte.weight) and twice in `state_dict`; its gradient is the
 *   sum of the embedding's and the head's. Init: every Linear and Embedding
 *   weight N(0, 0.02), biases 0, LayerNorm weight 1, and every c_proj.weight
 *   N(0, 0.02/sqrt(2 n_layer)), drawn in `params` order.
 *
 * All randomness (init, dropout masks) comes from PCG32. Errors follow the
 * op error model: every function that takes a context takes it first,
 * records the first error there (naming the function and the shapes) and
 * returns NULL or the status; it does nothing, returning NULL or the
 * context's status, when the context is NULL or already holds an error.
 * nb_gpt_load_state_dict, which has no context argument, records on the
 * model's parameter context. */
#ifndef NABLA_GPT_H
#define NABLA_GPT_H

#include "core.h"
#include "nn.h"
#include "random.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The model families. GPTMODEL and NANOGPT are GPT-2's block in two
 * layouts (above). LLAMA3 and QWEN3 are the course's Llama 3.2 and Qwen3
 * (llama3.py, qwen3.py; Qwen3-MoE is QWEN3 with n_expert > 0):
 *   x = tok_emb[ids]                                          (B, T, C)
 *   n_layer times:
 *       h = rms_norm(x, norm1, norm_eps)
 *       q = h Wq^T (B, T, H, hd), k = h Wk^T, v = h Wv^T (B, T, Hkv, hd)
 *       q, k = rms_norm over hd (q_norm, k_norm; qk_norm only)
 *       q, k = rope(q, k) at positions 0.. (theta, Llama 3 scaling)
 *       x = x + Wo sdpa(q, k, v, causal, GQA, window)
 *       h = rms_norm(x, norm2, norm_eps)
 *       x = x + W3 (silu(h W1^T) * (h W2^T))                    gated MLP
 *         (MoE: router logits h Wg^T, top n_expert_per_tok, softmax over
 *          them, the weighted sum of those experts' gated MLPs)
 *   logits = rms_norm(x, final_norm) head^T  (head = tok_emb when tie_head)
 * No biases, no dropout layers beyond `dropout` on the attention weights
 * (the course's models have none: keep it 0 to match them).
 *
 * Their state_dict names, in order (N the block; E the expert), course | HF:
 *   tok_emb.weight | model.embed_tokens.weight (V, C)
 *   Llama 3 (course): trf_blocks.N.att.W_key.weight, .att.W_value.weight
 *     (Hkv*hd, C), .att.W_query.weight (H*hd, C), .att.out_proj.weight (C, H*hd),
 *     .ff.fc1.weight, .ff.fc2.weight (hidden, C), .ff.fc3.weight (C, hidden),
 *     .norm1.weight, .norm2.weight (C); final_norm.weight
 *   Qwen3 (course): trf_blocks.N.att.W_query, W_key, W_value, out_proj,
 *     .att.q_norm.scale, .att.k_norm.scale (hd; qk_norm), then the MLP: dense
 *     .ff.fc1/fc2/fc3.weight, or MoE .ff.gate.weight (n_expert, C) and
 *     .ff.fc1.E.weight for every E, then every fc2.E, then every fc3.E
 *     (moe_hidden, C), (moe_hidden, C), (C, moe_hidden); .norm1.scale,
 *     .norm2.scale; final_norm.scale
 *   HF (both): model.layers.N.self_attn.{q,k,v,o}_proj.weight,
 *     .self_attn.{q,k}_norm.weight (qk_norm), .mlp.{gate,up,down}_proj.weight
 *     or .mlp.gate.weight and .mlp.experts.E.{gate,up,down}_proj.weight
 *     (each expert's three together), .input_layernorm.weight,
 *     .post_attention_layernorm.weight; model.norm.weight
 *   out_head.weight | lm_head.weight (V, C); with tie_head it is tok_emb's
 *     tensor, listed once in `params` and under both names in `state_dict`.
 * Init, drawn from rng in that order: the course's names take PyTorch's
 * defaults, as the course's modules are constructed (nn.Embedding N(0, 1),
 * nn.Linear U(-1/sqrt(in), 1/sqrt(in)), norms 1); Hugging Face's names take
 * its _init_weights (every Linear and Embedding weight N(0, 0.02), norms 1).
 * The RoPE tables (block_size, hd) are made once, at init, in the parameter
 * context (m->rope_cos, m->rope_sin). */
typedef enum nb_gpt_arch { NB_GPT_GPTMODEL, NB_GPT_NANOGPT, NB_GPT_LLAMA3, NB_GPT_QWEN3 } nb_gpt_arch;

typedef struct nb_gpt_config {
    nb_gpt_arch arch;
    int64_t vocab_size; /* V >= 1 */
    int64_t block_size; /* context length, >= 1 */
    int n_layer;        /* >= 1 */
    int n_head;         /* >= 1, divides n_embd */
    int64_t n_embd;     /* C >= 1 */
    double dropout;     /* in [0, 1); every dropout of the model */
    bool bias;          /* nanoGPT: Linear and LayerNorm biases */
    bool qkv_bias;      /* GPTModel: W_query/W_key/W_value biases */
    nb_dtype dtype;     /* NB_F32 or NB_F64 */
    bool no_grad;       /* parameters without grad buffers, nothing recorded
                           (sampling only). GPTModel's attention weights come
                           from nb_nn_mha_init, whose grad buffers are made and
                           then dropped (17% of the 124M model's weights) */
    nb_gelu_approx gelu; /* nanoGPT: the MLP's GELU, NB_GELU_NONE (exact erf,
                            nanoGPT's nn.GELU(); the default, and 0) or
                            NB_GELU_TANH (GPT-2's own gelu_new: nb_gpt_from_hf
                            sets it). GPTModel always uses tanh and ignores it. */
    /* ---- LLAMA3 and QWEN3 only (the GPT-2 layouts ignore these) ---- */
    int n_kv_head;          /* key/value heads, divides n_head (1: multi-query);
                               0 means n_head. course n_kv_groups, HF num_key_value_heads */
    int64_t head_dim;       /* per head, even (RoPE); 0 means n_embd / n_head.
                               Qwen3-0.6B: 128 with n_embd 1024 and 16 heads */
    int64_t hidden_dim;     /* the gated MLP's width: course hidden_dim, HF intermediate_size */
    double norm_eps;        /* every RMSNorm's eps: Llama 3 1e-5, Qwen3 1e-6 */
    double rope_theta;      /* course rope_base, HF rope_theta: Llama 3.2 500000, Qwen3 1e6 */
    bool rope_scaled;       /* Llama 3's frequency scaling with rope_scaling (course
                               rope_freq, HF rope_scaling with rope_type "llama3") */
    nb_rope_scaling rope_scaling;
    bool qk_norm;           /* RMSNorm over head_dim on q and k before RoPE (Qwen3) */
    bool tie_head;          /* the output head is tok_emb (HF tie_word_embeddings) */
    int n_expert;           /* > 0: each block's MLP is a mixture of n_expert gated MLPs */
    int n_expert_per_tok;   /* top-k experts a token runs through, 1..n_expert */
    int64_t moe_hidden_dim; /* each expert's width (HF moe_intermediate_size) */
    int64_t window;         /* > 0: sliding-window attention over the last `window` keys */
    bool hf_names;          /* state_dict under Hugging Face's names (model.layers.N...),
                               else the course's (trf_blocks.N...) */
} nb_gpt_config;

/* A config with each layout's familiar defaults:
 *   NB_GPT_GPTMODEL: the course's GPT_CONFIG_124M (vocab 50257, context 1024,
 *     emb 768, 12 heads, 12 layers, dropout 0.1, qkv_bias false,
 *     gelu tanh);
 *   NB_GPT_NANOGPT: nanoGPT's GPTConfig (vocab 50304, block 1024, 12/12/768,
 *     dropout 0, bias true, gelu NB_GELU_NONE);
 *   NB_GPT_LLAMA3: Llama 3.2 1B (vocab 128256, context 131072, 16 layers,
 *     32 heads, 8 kv heads, head_dim 64, emb 2048, hidden 8192, eps 1e-5,
 *     theta 500000, Llama 3 scaling 32/1/4/8192, tied head);
 *   NB_GPT_QWEN3: Qwen3 0.6B (vocab 151936, context 40960, 28 layers, 16
 *     heads, 8 kv heads, head_dim 128, emb 1024, hidden 3072, eps 1e-6,
 *     theta 1e6, qk_norm, tied head).
 * The course's names (hf_names false), dropout 0 for the last two.
 * dtype F32, no_grad false. */
nb_gpt_config nb_gpt_config_default(nb_gpt_arch arch);

/* Reads a config from a state_dict in either layout (as loaded by
 * nb_load_safetensors): the layout from the names (tok_emb.weight or
 * transformer.wte.weight), vocab_size and n_embd from the token embedding,
 * block_size from the position embedding, n_layer from the highest block
 * index, bias (nanoGPT: ln_f.bias present) and qkv_bias (GPTModel:
 * W_query.bias present). n_head cannot be read from the tensors and is
 * given. dropout 0, dtype from the token embedding (F32 or F64), no_grad
 * false. NB_ERR_FORMAT with a message on ctx naming what is missing or
 * inconsistent. */
nb_status nb_gpt_config_from_state_dict(nb_ctx *ctx, const nb_tensor_list *sd, int n_head,
                                        nb_gpt_config *out);

/* One transformer block. Read-only for users. */
typedef struct nb_gpt_block {
    nb_tensor *ln1_w, *ln1_b;    /* norm1.scale/.shift | ln_1.weight/.bias (b NULL without bias) */
    nb_nn_mha att;               /* GPTModel: W_query, W_key, W_value, out_proj */
    nb_tensor *c_attn_w, *c_attn_b; /* nanoGPT: (3C, C), (3C) or NULL */
    nb_tensor *c_proj_w, *c_proj_b; /* nanoGPT: (C, C), (C) or NULL */
    nb_tensor *ln2_w, *ln2_b;
    nb_tensor *fc_w, *fc_b;     /* ff.layers.0 | mlp.c_fc: (4C, C), (4C) */
    nb_tensor *proj_w, *proj_b; /* ff.layers.2 | mlp.c_proj: (C, 4C), (C);
                                   Llama 3 / Qwen3: fc3 | down_proj (C, hidden) */
    /* Llama 3 and Qwen3 (fc_w is fc1 | gate_proj (hidden, C), through silu) */
    nb_tensor *wq, *wk, *wv;    /* W_query | q_proj (H*hd, C), W_key, W_value (Hkv*hd, C) */
    nb_tensor *wo;              /* out_proj | o_proj (C, H*hd) */
    nb_tensor *q_norm, *k_norm; /* (hd), qk_norm only */
    nb_tensor *up_w;            /* fc2 | up_proj (hidden, C) */
    nb_tensor *router;          /* MoE: ff.gate | mlp.gate (n_expert, C) */
    nb_tensor **ex_gate, **ex_up, **ex_down; /* MoE: n_expert each, (moe_hidden, C),
                                                (moe_hidden, C), (C, moe_hidden) */
} nb_gpt_block;

typedef struct nb_gpt {
    nb_gpt_config cfg;
    nb_tensor *wte;          /* tok_emb | transformer.wte (V, C) */
    nb_tensor *wpe;          /* pos_emb | transformer.wpe (block_size, C) */
    nb_gpt_block *blocks;    /* n_layer blocks, in the parameter context */
    nb_tensor *lnf_w, *lnf_b; /* final_norm | transformer.ln_f */
    nb_tensor *head;         /* out_head.weight (V, C); nanoGPT, tie_head: == wte (tied) */
    nb_tensor *rope_cos, *rope_sin; /* Llama 3 / Qwen3: RoPE tables (block_size, hd),
                                       constants in the parameter context */
    nb_pcg32 *rng;           /* dropout masks (not owned); may be NULL with dropout 0 */
    bool training;           /* true after init; only dropout looks at it */
    bool use_fused;          /* Llama 3 / Qwen3, true after init: attention in one
                                nb_sdpa_ex. false: composed ops (scores, causal and
                                window masks, softmax, @ v, with k and v gathered to
                                the query heads), so that the tape explorer draws
                                each query head's weights; the same values to
                                rounding, slower, and dropout from nb_dropout's mask */
    bool expert_modules;     /* Qwen3-MoE, false after init: all experts' products as
                                three nb_grouped_linear ops over the tokens sorted by
                                expert. true (and with use_fused false): the course's
                                loop, each expert its own module "experts.E" that the
                                diagnostics page names (nabla-gpt --diagnostics sets
                                it); the same values to rounding, slower at 2 threads */
    nb_tensor_list params;   /* unique parameters in named_parameters() order, for
                                the optimizer (nanoGPT: no lm_head entry) */
    nb_tensor_list state_dict; /* every state_dict name (nanoGPT: lm_head.weight too,
                                  the same tensor as transformer.wte.weight) */
} nb_gpt;

/* Builds the model in `pctx` (parameters, names, blocks) and draws its
 * weights from rng as described above; with rng NULL the weights are left
 * zero (then load them). The rng pointer is kept for dropout: it must
 * outlive the model's training use (or be NULL with dropout 0). Clears *m
 * first. Returns NB_OK or the status recorded on pctx (bad config: "gpt:
 * n_embd 10 is not divisible by n_head 4"; Llama 3 / Qwen3 name the key
 * and its values: "gpt: n_head 4 is not a multiple of n_kv_head 3", an odd
 * head_dim, n_expert_per_tok outside [1, n_expert], a negative window, no
 * hidden_dim or moe_hidden_dim, rope_theta, rope_scaling or norm_eps out
 * of range, qk_norm or experts for Llama 3). */
nb_status nb_gpt_init(nb_ctx *pctx, nb_gpt *m, const nb_gpt_config *cfg, nb_pcg32 *rng);

/* Releases the heap storage of m's lists (params and state_dict grow past
 * NB_LIST_MAX entries onto the heap, see nb_list_free); the tensors live in
 * pctx and go with it. Call it before freeing pctx, or before a second init
 * of the same struct; a no-op for small models and NULL. */
void nb_gpt_free(nb_gpt *m);

/* nb_gpt_config_from_state_dict + nb_gpt_init(rng NULL) + copying every
 * tensor of the state_dict (converted to cfg dtype `dt`). dropout_rng as
 * init's rng (for dropout only). On error the status is returned and
 * recorded on pctx. */
nb_status nb_gpt_from_state_dict(nb_ctx *pctx, nb_gpt *m, const nb_tensor_list *sd, int n_head,
                                 double dropout, nb_dtype dt, nb_pcg32 *dropout_rng);

/* ---- GPT-2 checkpoints from Hugging Face --------------------------------------
 *
 * A GPT-2 model.safetensors as downloaded from the Hub (gpt2, gpt2-medium,
 * gpt2-large, gpt2-xl, or a fine-tune of them) is nanoGPT's layout under
 * other names, with four weights transposed. With P the prefix
 * "transformer." (GPT2LMHeadModel's names) or "" (GPT2Model's):
 *   P wte.weight (V, C), P wpe.weight (n_positions, C),
 *   P h.{i}.ln_1.weight / .bias, P h.{i}.ln_2.weight / .bias, P ln_f.weight / .bias,
 *   P h.{i}.attn.c_attn.weight (C, 3C), P h.{i}.attn.c_proj.weight (C, C),
 *   P h.{i}.mlp.c_fc.weight (C, 4C), P h.{i}.mlp.c_proj.weight (4C, C),
 *   and their biases (3C), (C), (4C), (C);
 *   lm_head.weight (V, C): absent (GPT2Model) or equal to wte (tied).
 * The four .weight matrices are Hugging Face's Conv1D, stored (in, out):
 * they are transposed on load into nanoGPT's nn.Linear (out, in), as
 * nanoGPT's from_pretrained does. The buffers h.{i}.attn.bias (the causal
 * mask) and h.{i}.attn.masked_bias are ignored, like any other name.
 * The model is NB_GPT_NANOGPT with bias true, n_layer, V, C and block_size
 * from the tensors and gelu NB_GELU_TANH (GPT-2's gelu_new; nanoGPT's
 * from_pretrained keeps its exact GELU instead, a small mismatch: set
 * m->cfg.gelu = NB_GELU_NONE after loading to get nanoGPT's numbers).
 * n_head is not in the tensors: it is config.json's, or the standard table
 * by width (nb_gpt_hf_n_head). */

/* The fields of a Hugging Face GPT2Config (config.json) nabla uses. A field
 * absent from the file is 0 (gelu: NB_GELU_TANH, layer_norm_epsilon 1e-5,
 * GPT2Config's defaults). */
typedef struct nb_gpt_hf_config {
    int n_layer, n_head;
    int64_t n_embd;
    int64_t n_positions; /* n_positions, else n_ctx */
    int64_t vocab_size;
    nb_gelu_approx gelu; /* activation_function: "gelu_new", "gelu_pytorch_tanh",
                            "gelu_fast" -> NB_GELU_TANH; "gelu" -> NB_GELU_NONE */
    double layer_norm_epsilon;
} nb_gpt_hf_config;

/* Reads a config.json into *out. NB_ERR_IO when it cannot be read,
 * NB_ERR_FORMAT when it is not a JSON object or a field has the wrong type
 * ("n_head" not a positive integer), NB_ERR_VALUE for an
 * activation_function nabla does not have; the message names the path and
 * the field. */
nb_status nb_gpt_hf_config_read(nb_ctx *ctx, const char *path, nb_gpt_hf_config *out);

/* The standard GPT-2 head count for a width: 768 -> 12 (gpt2), 1024 -> 16
 * (medium), 1280 -> 20 (large), 1600 -> 25 (xl); 0 for any other width. */
int nb_gpt_hf_n_head(int64_t n_embd);

/* Whether sd has Hugging Face's GPT-2 names and layout rather than
 * nanoGPT's (for a loader that takes either, such as --init_from=PATH):
 * true when it has wte.weight (no prefix), or transformer.wte.weight (V, C)
 * with transformer.h.0.attn.c_attn.weight stored (C, 3C), Conv1D's way
 * (nanoGPT stores it (3C, C)). False for NULL or anything else. */
bool nb_gpt_state_dict_is_hf(const nb_tensor_list *sd);

/* The config of a Hugging Face GPT-2 state_dict (either prefix), as above.
 * n_head > 0 is used as given; 0 takes nb_gpt_hf_n_head(n_embd), and an
 * unknown width is NB_ERR_VALUE ("gpt_from_hf: n_embd 48 is not a standard
 * GPT-2 width (768, 1024, 1280, 1600): give n_head or a config.json").
 * dtype from wte, dropout 0. NB_ERR_FORMAT naming the tensor when wte,
 * wpe or h.0.ln_1.weight is missing or misshapen. */
nb_status nb_gpt_config_from_hf(nb_ctx *ctx, const nb_tensor_list *sd, int n_head,
                                nb_gpt_config *out);

/* nb_gpt_config_from_hf + nb_gpt_init (weights zero) + every tensor copied
 * into the model, converted to `dt`, the Conv1D weights transposed: an
 * NB_GPT_NANOGPT model like any other (state_dict, params, forward, loss,
 * cache, generation, nb_save_safetensors under nanoGPT's names). dropout
 * and dropout_rng as in nb_gpt_from_state_dict. Every tensor is checked
 * before anything is built: NB_ERR_FORMAT naming the tensor when one is
 * missing, has the wrong shape ("h.0.attn.c_attn.weight is (96, 32);
 * expected (32, 96), Conv1D (in, out)") or a dtype other than F32/F64, or
 * when lm_head.weight differs from wte. The values go straight from sd's
 * tensors into the parameters (no intermediate copy): free sd's context
 * afterwards. Errors on pctx. */
nb_status nb_gpt_from_hf(nb_ctx *pctx, nb_gpt *m, const nb_tensor_list *sd, int n_head,
                         double dropout, nb_dtype dt, nb_pcg32 *dropout_rng);

/* A Hugging Face GPT-2 directory as downloaded: `path` is its
 * model.safetensors. When a config.json is beside it, it is read
 * (nb_gpt_hf_config_read): its n_head is used unless n_head > 0 is given,
 * its activation_function becomes m->cfg.gelu, and its n_layer, n_embd,
 * n_positions and vocab_size must agree with the tensors (NB_ERR_FORMAT
 * otherwise); a layer_norm_epsilon other than 1e-5 is NB_ERR_VALUE. Then
 * as nb_gpt_from_hf, but streamed (nb_load_safetensors_each): the file's
 * header is validated and every tensor checked before the model is built,
 * then the tensors are read one at a time straight into the parameters,
 * so the peak memory is the model plus the file's largest tensor (wte),
 * never the file and the model at once. lm_head.weight may come before or
 * after wte in the file. Every error (the file's, config.json's, the
 * model's) is recorded on pctx. */
nb_status nb_gpt_load_hf(nb_ctx *pctx, nb_gpt *m, const char *path, int n_head, double dropout,
                         nb_dtype dt, nb_pcg32 *dropout_rng);

/* The reverse of nb_gpt_load_hf: writes m as a Hugging Face GPT-2
 * directory, `path` (a model.safetensors of GPT2Model's names, as the gpt2
 * repository has them, the four Conv1D weights stored (in, out), in m's
 * dtype, metadata format "pt") and config.json beside it (n_layer, n_head,
 * n_embd, n_positions, vocab_size, activation_function gelu_new for
 * NB_GELU_TANH, else gelu), each to a temporary file renamed over an
 * existing one. nb_gpt_load_hf reads them back to the same model. m must
 * be GPT-2's shape, NB_GPT_NANOGPT with biases (NB_ERR_VALUE otherwise);
 * NB_ERR_NULL for NULLs, NB_ERR_IO naming the file. Errors on ctx; the
 * transposed copies live in a context of its own, freed before it returns. */
nb_status nb_gpt_save_hf(nb_ctx *ctx, const nb_gpt *m, const char *path);

/* ---- every family from and to a directory ----------------------------------
 *
 * A model directory is model.safetensors with its config beside it:
 * Hugging Face's config.json (hf_names true) or the course's cfg.json
 * (hf_names false). */

/* Reads a config file into *out (fields it does not set keep
 * nb_gpt_config_default's values for the family):
 *   config.json, by "model_type" (else "architectures"): "llama"
 *     (LlamaForCausalLM) -> NB_GPT_LLAMA3, "qwen3" (Qwen3ForCausalLM) and
 *     "qwen3_moe" (Qwen3MoeForCausalLM) -> NB_GPT_QWEN3, "gpt2" ->
 *     NB_GPT_NANOGPT with GPT-2's fields (nb_gpt_hf_config_read's); keys
 *     vocab_size, hidden_size, num_hidden_layers, num_attention_heads,
 *     num_key_value_heads, head_dim, intermediate_size, rms_norm_eps,
 *     rope_theta, rope_scaling {rope_type "llama3", factor,
 *     low_freq_factor, high_freq_factor, original_max_position_embeddings},
 *     max_position_embeddings (block_size), tie_word_embeddings,
 *     num_experts, num_experts_per_tok, moe_intermediate_size,
 *     norm_topk_prob (must be true), sliding_window (used only when
 *     use_sliding_window is true); hf_names true.
 *   cfg.json, the course's cfg dict: vocab_size, context_length, emb_dim,
 *     n_heads, n_layers, hidden_dim, n_kv_groups, head_dim, qk_norm,
 *     rope_base, rope_freq {factor, low_freq_factor, high_freq_factor,
 *     original_context_length}, num_experts, num_experts_per_tok,
 *     moe_intermediate_size, dtype; Qwen3 when it has qk_norm or head_dim,
 *     Llama 3 when it has rope_freq or n_kv_groups, else GPT-2's
 *     GPT_CONFIG (drop_rate, qkv_bias) -> NB_GPT_GPTMODEL; hf_names false.
 * NB_ERR_IO when it cannot be read; NB_ERR_FORMAT naming the path and the
 * key for a missing or mistyped key; NB_ERR_VALUE for an unknown
 * model_type or rope_type or values that cannot be built (n_head not a
 * multiple of n_kv_head, odd head_dim, n_expert_per_tok > n_expert). */
nb_status nb_gpt_config_read(nb_ctx *ctx, const char *path, nb_gpt_config *out);

/* Writes cfg as config.json (cfg->hf_names, or NB_GPT_NANOGPT: GPT-2's
 * GPT2Config) or the course's cfg.json, to a temporary file renamed over
 * `path`; nb_gpt_config_read gives cfg back. */
nb_status nb_gpt_config_write(nb_ctx *ctx, const nb_gpt_config *cfg, const char *path);

/* Builds m from a model directory: `path` is its model.safetensors, the
 * config is the config.json or cfg.json beside it (config.json first), and
 * the tensors' names and shapes must be the config's (NB_ERR_FORMAT naming
 * the tensor otherwise). Any family; GPT-2's Hugging Face files go through
 * nb_gpt_load_hf. dropout, dt and dropout_rng as nb_gpt_from_state_dict. */
nb_status nb_gpt_load(nb_ctx *pctx, nb_gpt *m, const char *path, double dropout, nb_dtype dt,
                      nb_pcg32 *dropout_rng);

/* Writes m as a model directory: `path` (model.safetensors, m's state_dict
 * names, a tied head stored once as Hugging Face does) and the config
 * beside it in m's layout; each to a temporary file renamed over the old
 * one. nb_gpt_load reads it back to the same model. */
nb_status nb_gpt_save(nb_ctx *ctx, const nb_gpt *m, const char *path);

/* Copies values from a state_dict with the model's layout names and shapes
 * (nb_params_copy_from on m->state_dict). With a tied head, lm_head.weight
 * may be absent from sd; when present it must equal transformer.wte.weight.
 * Errors are recorded on the model's parameter context (the pctx it was
 * built in, m->wte->owner); NB_ERR_NULL alone for a NULL or uninitialised
 * model. */
nb_status nb_gpt_load_state_dict(nb_gpt *m, const nb_tensor_list *sd);

/* Training mode (dropout on) or eval mode (off). NULL is a no-op. */
void nb_gpt_train(nb_gpt *m, bool on);

/* ids I64 (B, T) with 1 <= T <= block_size, values in [0, V) -> logits (B, T, V),
 * recorded on ctx's tape (when grad recording is on). */
nb_tensor *nb_gpt_forward(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids);

/* Mean cross-entropy of the logits of ids (B, T) against targets I64 (B, T):
 * F.cross_entropy(logits.view(-1, V), targets.view(-1)). A 0-dim tensor; if
 * logits is not NULL it receives the (B, T, V) logits. */
nb_tensor *nb_gpt_loss(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids, const nb_tensor *targets,
                       nb_tensor **logits);

/* Inference forward: eval mode (no dropout), grad recording off on ctx for
 * the call (no tape nodes, no gradient buffers), whatever m->training and
 * ctx's setting are; both are restored. Same values as nb_gpt_forward in
 * eval mode. ids (B, T) -> logits (B, T, V). */
nb_tensor *nb_gpt_infer(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids);

/* ---- KV cache ------------------------------------------------------------ */

/* Keys and values of every layer for positions 0..len-1 of `batch`
 * sequences, capacity block_size positions: n_kv_head heads of head_dim
 * (grouped-query attention caches only its key/value heads), keys turned
 * by RoPE at their positions. Owns its memory. */
typedef struct nb_gpt_cache nb_gpt_cache;

/* A cache for m (its dtype, n_layer, kv heads, head_dim, block_size) and `batch`
 * sequences. NULL and an error on ctx when out of memory or batch < 1 (ctx
 * only records errors: the cache's memory is its own). */
nb_gpt_cache *nb_gpt_cache_new(nb_ctx *ctx, const nb_gpt *m, int64_t batch);
void nb_gpt_cache_free(nb_gpt_cache *c); /* NULL is a no-op */
void nb_gpt_cache_reset(nb_gpt_cache *c); /* len = 0 */
int64_t nb_gpt_cache_len(const nb_gpt_cache *c);

/* Inference forward of n new tokens ids (B, n) at positions len..len+n-1,
 * attending to the cached positions and to each other causally; appends
 * their keys and values (len += n). -> logits (B, n, V), equal to the last
 * n positions of nb_gpt_infer on the whole sequence (to rounding; RoPE at
 * positions len.., the sliding window counted from each position). The cost
 * of one token at position t is O(t C) per layer for attention plus the
 * linear layers. len + n must not exceed block_size (NB_ERR_VALUE). */
nb_tensor *nb_gpt_forward_cached(nb_ctx *ctx, nb_gpt *m, nb_gpt_cache *c, const nb_tensor *ids);

/* ---- generation ------------------------------------------------------------ */

typedef struct nb_gpt_sample_opts {
    int64_t max_new_tokens; /* >= 0 */
    double temperature;     /* > 0: logits / temperature; 0: greedy (argmax) */
    int64_t top_k;          /* > 0: keep logits >= the k-th largest (nanoGPT); 0: all */
    uint64_t seed;          /* PCG32 seed of the token draws */
    bool use_cache;         /* KV cache; false recomputes the window each token */
    /* Called after each new token (may be NULL); a nonzero return stops. */
    int (*on_token)(int64_t token, void *user);
    void *user;
} nb_gpt_sample_opts;

/* {max_new_tokens 100, temperature 1, top_k 0, seed 1337, use_cache true} */
nb_gpt_sample_opts nb_gpt_sample_defaults(void);

/* nanoGPT's generate for one sequence: starting from prompt[0..n_prompt-1]
 * (n_prompt >= 1), repeat: take the last block_size tokens, logits of the
 * last position, / temperature, top-k, softmax, draw a token from PCG32 (u
 * in [0, 1), first index whose cumulative probability exceeds u), append.
 * out receives n_prompt + max_new_tokens tokens (the prompt first); *n_out
 * (may be NULL) the count written (fewer when on_token stopped early).
 * With the cache, positions beyond block_size re-fill the cache with the
 * last block_size tokens, so cached and uncached runs give the same tokens.
 * Runs in inference mode, on a private context; errors are recorded on ctx. */
nb_status nb_gpt_generate(nb_ctx *ctx, nb_gpt *m, const int64_t *prompt, int64_t n_prompt,
                          const nb_gpt_sample_opts *o, int64_t *out, int64_t *n_out);

/* ---- summary ------------------------------------------------------------- */

/* Parameter count: every state_dict tensor once. count_tied: the course's
 * "counted as tied" figure, total minus the output head (for GPTModel,
 * whose head is separate; for nanoGPT the head is already the same tensor
 * and is counted once either way). */
int64_t nb_gpt_num_params(const nb_gpt *m, bool count_tied);

/* Prints the model summary to f: layout and config, a per-module table
 * (module, parameter shape list, count), the total, the total with the head
 * counted as tied, and the size in MB (2^20 bytes) of the parameters as
 * float32:
 *   Total number of parameters: 163,009,536
 *   Number of trainable parameters considering weight tying: 124,412,160
 *   Total size of the model: 621.83 MB */
void nb_gpt_summary(const nb_gpt *m, FILE *f);

#ifdef __cplusplus
}
#endif
#endif
