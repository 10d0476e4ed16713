/* gpt_optim.h - the optimizer nabla-gpt's --optimizer names, over a GPT's
 * parameters (train and bench build theirs here). Internal to the tools. */
#ifndef NB_GPT_OPTIM_H
#define NB_GPT_OPTIM_H

#include <nabla.h>

/* What the optimizer is made from (the flags of the same names). */
typedef struct gpt_optim_opts {
    const char *optimizer; /* "adamw" or "muon" */
    double learning_rate, beta1, beta2, weight_decay, muon_lr, muon_momentum;
    bool weight_decay_1d;  /* adamw only: decay the 1-D parameters too */
    int muon_ns_steps;     /* muon only: Newton-Schulz iterations a step */
    /* AdamW's peak rates for three kinds of parameter, each scaling with
     * the schedule (nb_optim_set_lr_scale by rate / learning_rate); 0 means
     * learning_rate */
    double embedding_lr, head_lr, scalar_lr;
} gpt_optim_opts;


/* Does Muon update this parameter under --optimizer=muon? The 2-D weights
 * inside the blocks ("trf_blocks." (the course's GPTModel, Llama 3, Qwen3),
 * "transformer.h." (nanoGPT) or "model.layers." (Hugging Face's Llama 3 and
 * Qwen3) names: the attention and MLP matrices, a MoE's router and experts);
 * the embeddings, the head and every gain (QK-norm's too) and bias go to
 * AdamW. */
bool gpt_optim_muon_param(const char *name, const nb_tensor *t);

/* adamw: nanoGPT's AdamW groups (nb_adamw_new_groups, eps 1e-8).
 * muon: nb_muon_adamw_new with Muon {muon_lr, muon_momentum, nesterov,
 * muon_ns_steps, weight_decay} on the block matrices and AdamW {learning_rate,
 * beta1, beta2, eps 1e-10, weight_decay} on the rest (every parameter
 * decayed, as muon.py's MuonWithAuxAdam example). Either way the
 * embeddings, the head and the 1-D parameters then step at embedding_lr,
 * head_lr and scalar_lr when given (the speedrun's separate rates; Muon's
 * matrices are never among them). NULL with the reason on pctx. */
nb_optim *gpt_optim_new(nb_ctx *pctx, const nb_gpt *gpt, const gpt_optim_opts *o);

#endif
