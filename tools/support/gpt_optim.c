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

nb_optim *gpt_optim_new(nb_ctx *pctx, const nb_gpt *gpt, const gpt_optim_opts *o) {
    const nb_tensor_list *params = &gpt->params;
    nb_adam_opts ao = nb_adamw_defaults(o->learning_rate);
    ao.beta1 = o->beta1, ao.beta2 = o->beta2, ao.weight_decay = o->weight_decay;
    if (strcmp(o->optimizer, "muon")) return nb_adamw_new_groups(pctx, params, ao, o->weight_decay_1d);
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
    return opt;
}
