/* gpt_optim.c - nabla-gpt's --optimizer: nanoGPT's AdamW groups, or Muon on
 * the blocks' matrices with AdamW on the rest. */
#include <stdlib.h>
#include <string.h>

#include "gpt_optim.h"

static bool starts_with(const char *s, const char *prefix) {
    return s && !strncmp(s, prefix, strlen(prefix));
}

bool gpt_optim_muon_param(const char *name, const nb_tensor *t) {
    return t && t->ndim >= 2 &&
           (starts_with(name, "trf_blocks.") || starts_with(name, "transformer.h.") ||
            starts_with(name, "model.layers."));
}

static bool ends_with(const char *s, const char *suffix) {
    size_t n = s ? strlen(s) : 0, k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* Which of the own rates a parameter takes: the token and position
 * embeddings (a tied head is the token embedding), an untied output head,
 * the 1-D parameters (gains and biases), or none (the matrices, which are
 * also all Muon's under --optimizer=muon). */
typedef enum { LR_BASE, LR_EMBEDDING, LR_HEAD, LR_SCALAR } lr_kind;

static lr_kind lr_kind_of(const char *name, const nb_tensor *t) {
    static const char *const emb[] = {"tok_emb.weight", "pos_emb.weight", "wte.weight",
                                      "wpe.weight", "embed_tokens.weight"};
    for (size_t i = 0; i < sizeof emb / sizeof *emb; i++)
        if (ends_with(name, emb[i])) return LR_EMBEDDING;
    if (ends_with(name, "out_head.weight") || ends_with(name, "lm_head.weight")) return LR_HEAD;
    return t && t->ndim == 1 ? LR_SCALAR : LR_BASE;
}

/* The embeddings', head's and 1-D parameters' own rates, as multiples of
 * learning_rate (which the schedule moves). */
static nb_optim *set_rates(nb_optim *opt, const nb_tensor_list *params,
                           const gpt_optim_opts *o) {
    const double rate[4] = {0, o->embedding_lr, o->head_lr, o->scalar_lr};
    for (int i = 0; opt && i < params->n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        const char *name = nb_list_name(params, i);
        lr_kind k = lr_kind_of(name, t);
        if (k == LR_BASE || rate[k] == 0) continue;
        /* learning_rate 0 gives an infinite scale, which is refused */
        if (nb_optim_set_lr_scale(opt, i, rate[k] / o->learning_rate)) {
            nb_optim_free(opt);
            return NULL;
        }
    }
    return opt;
}

nb_optim *gpt_optim_new(nb_ctx *pctx, const nb_gpt *gpt, const gpt_optim_opts *o) {
    const nb_tensor_list *params = &gpt->params;
    nb_adam_opts ao = nb_adamw_defaults(o->learning_rate);
    ao.beta1 = o->beta1, ao.beta2 = o->beta2, ao.weight_decay = o->weight_decay;
    if (strcmp(o->optimizer, "muon"))
        return set_rates(nb_adamw_new_groups(pctx, params, ao, o->weight_decay_1d), params, o);
    ao.eps = 1e-10;
    nb_muon_opts mo = nb_muon_defaults();
    mo.lr = o->muon_lr, mo.momentum = o->muon_momentum, mo.weight_decay = o->weight_decay;
    mo.ns_steps = o->muon_ns_steps;
    bool *use = malloc((size_t)(params->n > 0 ? params->n : 1) * sizeof *use);
    if (!use) {
        nb_ctx_fail(pctx, NB_ERR_MEMORY, "muon: out of memory");
        return NULL;
    }
    for (int i = 0; i < params->n; i++)
        use[i] = gpt_optim_muon_param(nb_list_name(params, i), nb_list_tensor(params, i));
    nb_optim *opt = nb_muon_adamw_new(pctx, params, use, mo, ao);
    free(use);
    return set_rates(opt, params, o);
}
