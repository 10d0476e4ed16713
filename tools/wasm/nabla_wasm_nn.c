/* tools/wasm/nabla_wasm_nn.c - the modules, optimizers, generators and the
 * tape explorer's page model for nabla.js (docs/wasm.md): what
 * tools/wasm/nabla_api.js needs to build the C modules (nb_nn_*, nb_gpt)
 * and optimizers from JavaScript numbers.
 *
 * Each module struct is malloc'ed here (JavaScript does not know its
 * layout) with its parameters in the context given; nb_wasm_module_free
 * releases the struct (the parameters go with their context). Generators
 * are malloc'ed nb_pcg32 states that dropout keeps pointing at. Optimizers
 * are the library's own: nb_optim_step and nb_optim_free are called
 * directly. Errors are recorded on the context given, as everywhere. */
#include <emscripten.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"
#include "teach/tape_json.h" /* nb_tape_json_write: the page's model, with steps */

/* ---- generators ------------------------------------------------------------- */

/* A PCG32 seeded (seed, stream), malloc'ed: what nb_pcg32_seed gives in C. */
EMSCRIPTEN_KEEPALIVE nb_pcg32 *nb_wasm_rng_new(double seed, double stream) {
    nb_pcg32 *r = malloc(sizeof *r);
    if (r) nb_pcg32_seed(r, (uint64_t)seed, (uint64_t)stream);
    return r;
}
EMSCRIPTEN_KEEPALIVE int nb_wasm_rng_bytes(void) { return (int)sizeof(nb_pcg32); }
EMSCRIPTEN_KEEPALIVE double nb_wasm_rng_bounded(nb_pcg32 *r, double bound) {
    return (double)nb_pcg32_bounded(r, (uint32_t)bound);
}
EMSCRIPTEN_KEEPALIVE double nb_wasm_rng_double(nb_pcg32 *r) { return nb_pcg32_double(r); }

/* ---- modules ------------------------------------------------------------------- */

/* A module of the kind: malloc'ed struct, parameters in pctx. */
typedef enum { MOD_LINEAR, MOD_DROPOUT, MOD_EMBEDDING, MOD_LAYER_NORM, MOD_MHA, MOD_GPT } mod_kind;

typedef struct wasm_module {
    mod_kind kind;
    union {
        nb_nn_linear linear;
        nb_nn_dropout dropout;
        nb_nn_embedding embedding;
        nb_nn_layer_norm layer_norm;
        nb_nn_mha mha;
        nb_gpt gpt;
    } u;
} wasm_module;

static wasm_module *module_new(mod_kind kind) {
    wasm_module *m = calloc(1, sizeof *m);
    if (m) m->kind = kind;
    return m;
}

/* m when st is NB_OK, else NULL (m freed; the error is on pctx). */
static wasm_module *module_done(wasm_module *m, nb_status st) {
    if (st == NB_OK) return m;
    free(m);
    return NULL;
}

static nb_status no_memory(nb_ctx *pctx, const char *what) {
    return nb_ctx_fail(pctx, NB_ERR_MEMORY, "%s: no memory for the module", what);
}

EMSCRIPTEN_KEEPALIVE wasm_module *nb_wasm_linear_new(nb_ctx *pctx, double in, double out,
                                                     bool bias, int dt, nb_pcg32 *rng) {
    wasm_module *m = module_new(MOD_LINEAR);
    if (!m) return no_memory(pctx, "Linear"), NULL;
    return module_done(m, nb_nn_linear_init(pctx, &m->u.linear, (int64_t)in, (int64_t)out, bias,
                                            (nb_dtype)dt, rng));
}

EMSCRIPTEN_KEEPALIVE wasm_module *nb_wasm_dropout_new(nb_ctx *pctx, double p, nb_pcg32 *rng) {
    wasm_module *m = module_new(MOD_DROPOUT);
    if (!m) return no_memory(pctx, "Dropout"), NULL;
    return module_done(m, nb_nn_dropout_init(pctx, &m->u.dropout, p, rng));
}

EMSCRIPTEN_KEEPALIVE wasm_module *nb_wasm_embedding_new(nb_ctx *pctx, double num, double dim,
                                                        int dt, nb_pcg32 *rng) {
    wasm_module *m = module_new(MOD_EMBEDDING);
    if (!m) return no_memory(pctx, "Embedding"), NULL;
    return module_done(m, nb_nn_embedding_init(pctx, &m->u.embedding, (int64_t)num, (int64_t)dim,
                                               (nb_dtype)dt, rng));
}

EMSCRIPTEN_KEEPALIVE wasm_module *nb_wasm_layer_norm_new(nb_ctx *pctx, double dim, double eps,
                                                         bool affine, int dt) {
    wasm_module *m = module_new(MOD_LAYER_NORM);
    if (!m) return no_memory(pctx, "LayerNorm"), NULL;
    return module_done(m, nb_nn_layer_norm_init(pctx, &m->u.layer_norm, (int64_t)dim, eps, affine,
                                                (nb_dtype)dt));
}

/* MultiHeadAttention; fused false keeps the seed's composed ops on the
 * tape (what the explorer shows op by op, and nb_dropout's mask). */
EMSCRIPTEN_KEEPALIVE wasm_module *nb_wasm_mha_new(nb_ctx *pctx, double d_in, double d_out,
                                                  double context_length, double dropout,
                                                  int heads, bool qkv_bias, bool fused, int dt,
                                                  nb_pcg32 *rng) {
    wasm_module *m = module_new(MOD_MHA);
    if (!m) return no_memory(pctx, "MultiHeadAttention"), NULL;
    nb_status st = nb_nn_mha_init(pctx, &m->u.mha, (int64_t)d_in, (int64_t)d_out,
                                  (int64_t)context_length, dropout, heads, qkv_bias, (nb_dtype)dt,
                                  rng);
    m->u.mha.use_fused = fused;
    return module_done(m, st);
}

/* The course's GPTModel (nb_gpt with NB_GPT_GPTMODEL's layout). */
EMSCRIPTEN_KEEPALIVE wasm_module *nb_wasm_gpt_new(nb_ctx *pctx, double vocab, double block,
                                                  int layers, int heads, double embd,
                                                  double dropout, bool qkv_bias, int dt,
                                                  nb_pcg32 *rng) {
    wasm_module *m = module_new(MOD_GPT);
    if (!m) return no_memory(pctx, "GPT"), NULL;
    nb_gpt_config cfg = nb_gpt_config_default(NB_GPT_GPTMODEL);
    cfg.vocab_size = (int64_t)vocab;
    cfg.block_size = (int64_t)block;
    cfg.n_layer = layers;
    cfg.n_head = heads;
    cfg.n_embd = (int64_t)embd;
    cfg.dropout = dropout;
    cfg.qkv_bias = qkv_bias;
    cfg.dtype = (nb_dtype)dt;
    nb_status st = nb_gpt_init(pctx, &m->u.gpt, &cfg, rng);
    if (st) nb_gpt_free(&m->u.gpt);
    return module_done(m, st);
}

/* x -> the module's forward on ctx (ids for Embedding and GPT). */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_module_forward(nb_ctx *ctx, wasm_module *m, nb_tensor *x) {
    switch (m->kind) {
    case MOD_LINEAR: return nb_nn_linear_forward(ctx, &m->u.linear, x);
    case MOD_DROPOUT: return nb_nn_dropout_forward(ctx, &m->u.dropout, x);
    case MOD_EMBEDDING: return nb_nn_embedding_forward(ctx, &m->u.embedding, x);
    case MOD_LAYER_NORM: return nb_nn_layer_norm_forward(ctx, &m->u.layer_norm, x);
    case MOD_MHA: return nb_nn_mha_forward(ctx, &m->u.mha, x);
    case MOD_GPT: return nb_gpt_forward(ctx, &m->u.gpt, x);
    }
    return NULL;
}

/* The GPT's mean cross-entropy of ids (B, T) against targets (B, T). */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_gpt_loss(nb_ctx *ctx, wasm_module *m, nb_tensor *ids,
                                                 nb_tensor *targets) {
    if (m->kind != MOD_GPT) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "loss: the module is not a GPT");
        return NULL;
    }
    return nb_gpt_loss(ctx, &m->u.gpt, ids, targets, NULL);
}

/* PyTorch's .train(on) / .eval(). */
EMSCRIPTEN_KEEPALIVE void nb_wasm_module_train(wasm_module *m, bool on) {
    switch (m->kind) {
    case MOD_LINEAR: nb_nn_linear_train(&m->u.linear, on); break;
    case MOD_DROPOUT: nb_nn_dropout_train(&m->u.dropout, on); break;
    case MOD_EMBEDDING: nb_nn_embedding_train(&m->u.embedding, on); break;
    case MOD_LAYER_NORM: nb_nn_layer_norm_train(&m->u.layer_norm, on); break;
    case MOD_MHA: nb_nn_mha_train(&m->u.mha, on); break;
    case MOD_GPT: m->u.gpt.training = on; break;
    }
}

/* The module's parameter list (named_parameters() names and order). */
EMSCRIPTEN_KEEPALIVE nb_tensor_list *nb_wasm_module_params(wasm_module *m) {
    switch (m->kind) {
    case MOD_LINEAR: return &m->u.linear.params;
    case MOD_DROPOUT: return &m->u.dropout.params;
    case MOD_EMBEDDING: return &m->u.embedding.params;
    case MOD_LAYER_NORM: return &m->u.layer_norm.params;
    case MOD_MHA: return &m->u.mha.params;
    case MOD_GPT: return &m->u.gpt.params;
    }
    return NULL;
}

EMSCRIPTEN_KEEPALIVE void nb_wasm_module_free(wasm_module *m) {
    if (m && m->kind == MOD_GPT) nb_gpt_free(&m->u.gpt);
    free(m);
}

/* ---- parameter lists ----------------------------------------------------------- */

EMSCRIPTEN_KEEPALIVE nb_tensor_list *nb_wasm_list_new(void) { return calloc(1, sizeof(nb_tensor_list)); }
EMSCRIPTEN_KEEPALIVE void nb_wasm_list_free(nb_tensor_list *l) {
    if (l) nb_list_free(l);
    free(l);
}
/* Appends t as `name`, copied into t's context (the list and the
 * optimizer made from it keep the pointer). */
EMSCRIPTEN_KEEPALIVE int nb_wasm_list_add(nb_tensor_list *l, nb_tensor *t, const char *name) {
    size_t n = strlen(name) + 1;
    char *copy = nb_ctx_alloc(t->owner, n);
    if (!copy) return (int)NB_ERR_MEMORY;
    memcpy(copy, name, n);
    return (int)nb_list_add(l, copy, t);
}
EMSCRIPTEN_KEEPALIVE int nb_wasm_list_len(const nb_tensor_list *l) { return l->n; }
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_list_tensor(const nb_tensor_list *l, int i) {
    return nb_list_tensor(l, i);
}
EMSCRIPTEN_KEEPALIVE const char *nb_wasm_list_name(const nb_tensor_list *l, int i) {
    return nb_list_name(l, i);
}

/* ---- optimizers ------------------------------------------------------------------ */

/* torch.optim.SGD over the list (copied by the optimizer); errors on ctx. */
EMSCRIPTEN_KEEPALIVE nb_optim *nb_wasm_sgd_new(nb_ctx *ctx, const nb_tensor_list *l, double lr,
                                               double momentum, double dampening, double wd,
                                               bool nesterov) {
    nb_sgd_opts o = nb_sgd_defaults(lr);
    o.momentum = momentum;
    o.dampening = dampening;
    o.weight_decay = wd;
    o.nesterov = nesterov;
    return nb_sgd_new(ctx, l, o);
}

/* torch.optim.Adam, or AdamW with decoupled true. */
EMSCRIPTEN_KEEPALIVE nb_optim *nb_wasm_adam_new(nb_ctx *ctx, const nb_tensor_list *l, double lr,
                                                double beta1, double beta2, double eps, double wd,
                                                bool amsgrad, bool decoupled) {
    nb_adam_opts o = decoupled ? nb_adamw_defaults(lr) : nb_adam_defaults(lr);
    o.beta1 = beta1;
    o.beta2 = beta2;
    o.eps = eps;
    o.weight_decay = wd;
    o.amsgrad = amsgrad;
    return decoupled ? nb_adamw_new(ctx, l, o) : nb_adam_new(ctx, l, o);
}

/* ---- the explorer's page model ----------------------------------------------------- */

/* Module.nbCheckForward(c) runs the page's forward again on the fresh
 * context c and returns its output (0 when it failed). */
EM_JS(nb_tensor *, js_check_forward, (nb_ctx * c), { return Module.nbCheckForward(c); });

static nb_tensor *check_forward(nb_ctx *c, nb_tensor *const *in, void *user) {
    (void)in, (void)user;
    return js_check_forward(c);
}

/* The JSON model the tape explorer's page embeds (nb_tape_html's, with each
 * node's "sends"; with check, each float64 node's gradient check against
 * Module.nbCheckForward), malloc'ed; NULL with the error on ctx. */
EMSCRIPTEN_KEEPALIVE char *nb_wasm_page_json(nb_ctx *ctx, const nb_tensor *root, bool check) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "tape_html: no memory for the page");
        return NULL;
    }
    nb_tape_html_opts o = {0};
    o.forward = check_forward;
    nb_status s = nb_tape_json_write(ctx, root, f, true, check ? &o : NULL);
    if (fclose(f) != 0 && s == NB_OK) s = NB_ERR_MEMORY;
    if (s != NB_OK) {
        if (nb_ctx_ok(ctx)) nb_ctx_fail(ctx, s, "tape_html: the page's model could not be written");
        free(text);
        return NULL;
    }
    return text;
}

/* ---- training diagnostics ------------------------------------------------------------ */

/* nb_diag_write_html's page for d, malloc'ed; NULL with the error on ctx. */
EMSCRIPTEN_KEEPALIVE char *nb_wasm_diag_html(nb_ctx *ctx, nb_diag *d) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "diag_write_html: no memory for the page");
        return NULL;
    }
    nb_status s = nb_diag_write_html(ctx, d, f);
    if (fclose(f) != 0 && s == NB_OK) s = nb_ctx_fail(ctx, NB_ERR_MEMORY, "diag_write_html: no memory");
    if (s != NB_OK) {
        free(text);
        return NULL;
    }
    return text;
}
