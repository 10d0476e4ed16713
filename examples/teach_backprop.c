/* teach_backprop - every step of reverse-mode autodiff on one small
 * expression, the way a lecture goes through it:
 *
 *   a = x @ W        (2, 3) @ (3, 2)
 *   h = tanh(a)
 *   p = softmax(h)   over each row
 *   L = mse_loss(p, target)
 *
 * It prints the tape (the forward pass, one op a line), then walks backward
 * by hand-readable steps: for each op, newest first, the gradient that
 * arrived at its output and the gradients it sent to its inputs.
 * --model=attention records the seeds' CausalAttention instead, and
 * --model=gpt a 2-layer GPT, its ops grouped by module, and --model=qwen3
 * a 2-layer Qwen3 with grouped-query attention (4 query heads reading 2
 * key/value heads) and QK-norm.
 * It writes only the files its flags name: the interactive page (--html),
 * the Graphviz graph (--dot; `dot -Tsvg` draws it) and the tape as JSON
 * (--json). */
#include <stdio.h>
#include <string.h>

#include "nabla.h"

#include "../tests/attention_refs.h"
#include "seed_common.h"
#include "teach_common.h"

static const char *const usage =
    "usage: teach_backprop [--model=lecture|attention|gpt|qwen3] [--html=PAGE] [--dot=GRAPH]\n"
    "                      [--json=TAPE] [--layout-js=ELK] [--force]\n"
    "Walks one backward pass op by op. Writes nothing unless asked:\n"
    "  --html=PAGE   the tape explorer: one self-contained HTML page\n"
    "  --dot=GRAPH   the tape as Graphviz (dot -Tsvg GRAPH -o tape.svg)\n"
    "  --json=TAPE   the tape's tensors and gradients as JSON\n"
    "  --layout-js=ELK  another elkjs elk.bundled.js to inline (default: the build's)\n"
    "  --force       replace those files if they exist\n"
    "  --model=NAME  lecture (default): mse_loss(softmax(tanh(x @ W)), target);\n"
    "                attention: the seeds' CausalAttention(3, 2) on six tokens;\n"
    "                gpt: a 2-layer GPT (GPTModel layout) on four tokens;\n"
    "                qwen3: a 2-layer Qwen3 (4 query heads, 2 kv heads) on four tokens\n";

/* The lecture's forward: in = x, W, target (also the page's "check this
 * op", which runs it again). */
static nb_tensor *lecture_f(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    /* NB_HERE stamps the next ops with this file and line, for the tape. */
    NB_HERE(ctx); nb_tensor *a = nb_matmul(ctx, in[0], in[1]);
    NB_HERE(ctx); nb_tensor *h = nb_tanh(ctx, a);
    NB_HERE(ctx); nb_tensor *p = nb_softmax(ctx, h);
    NB_HERE(ctx); return nb_mse_loss(ctx, p, in[2]);
}

/* The lecture's expression, with the walkthrough printed step by step. */
static nb_tensor *lecture(nb_ctx *ctx, nb_tape_html_opts *page) {
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3), (double[]){0.5, -1.0, 2.0, 1.5, 0.2, -0.3});
    nb_tensor *W = nb_requires_grad(
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(3, 2), (double[]){0.1, -0.2, 0.4, 0.3, -0.5, 0.6}));
    nb_tensor *target = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    if (!W) return NULL;
    x->name = "x", W->name = "W", target->name = "target";

    static nb_tensor *in[3];
    in[0] = x, in[1] = W, in[2] = target;
    page->forward = lecture_f, page->n_in = 3, page->in = in;
    nb_tensor *L = lecture_f(ctx, in, NULL);
    if (!L) return NULL;
    nb_tensor *p = nb_node_input(L->node, 0), *h = nb_node_input(p->node, 0);
    nb_tensor *a = nb_node_input(h->node, 0);
    a->name = "a", h->name = "h", p->name = "p", L->name = "L";

    printf("forward: the tape records each op as it runs\n");
    nb_tape_print(ctx, stdout);
    printf("\nL = ");
    nb_print(L);

    printf("\nbackward: dL/dL = 1, then each op's local rule, newest first\n");
    if (nb_backward(ctx, L, NULL)) return NULL;
    nb_tensor *steps[4] = {L, p, h, a};
    const char *rule[4] = {
        "mse_loss:  dL/dp = 2 (p - target) / numel",
        "softmax:   dL/dh = p * (dL/dp - sum(dL/dp * p))   (row by row)",
        "tanh:      dL/da = dL/dh * (1 - h^2)",
        "matmul:    dL/dW = x^T @ dL/da   (x needs no gradient)",
    };
    for (int k = 0; k < 4; k++) {
        nb_tensor *out = steps[k], *in = k < 3 ? steps[k + 1] : W;
        printf("\n#%d %s\ngrad arriving at %s:\n", 3 - k, rule[k], out->name);
        nb_print_grad(out);
        printf("grad sent to %s:\n", in->name);
        nb_print_grad(in);
    }
    return L;
}

/* The seeds' CausalAttention(3, 2, context_length=6, dropout=0) with the
 * notebook's weights, on "Your journey starts with one step"; L = mean. */
static nb_tensor *attention_f(nb_ctx *ctx, nb_tensor *const *in, void *ca) {
    NB_HERE(ctx); return nb_mean(ctx, nb_nn_causal_attention_forward(ctx, ca, in[0]));
}

static nb_tensor *attention(nb_ctx *ctx, nb_ctx *params, nb_tape_html_opts *page) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 1);
    static nb_nn_causal_attention ca;
    if (nb_nn_causal_attention_init(params, &ca, 3, 2, 6, 0.0, false, NB_F64, &rng)) return NULL;
    ca.use_fused = false; /* the seed's ops one by one, each a step of the walk */
    load(params, &ca.params, 3, ref_ca_eval_names, ref_ca_eval_params);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(1, 6, 3), inputs_data);
    if (!x) return NULL;
    x->name = "inputs";
    static nb_tensor *in[1];
    in[0] = x;
    page->forward = attention_f, page->user = &ca, page->n_in = 1, page->in = in;
    nb_tensor *L = attention_f(ctx, in, &ca);
    if (!L || nb_backward(ctx, L, NULL)) return NULL;
    L->name = "L";
    return L;
}

/* A 2-layer GPT (the course's GPTModel layout: d_model 8, 2 heads, 4
 * tokens, vocabulary 12), cross-entropy against the next tokens. Its ops are
 * grouped by module path as the state_dict names them (trf_blocks.0.att,
 * trf_blocks.1.ff, ...); the attention runs op by op (use_fused false) so
 * its softmax, the attention map, is on the tape. */
static nb_tensor *gpt_f(nb_ctx *ctx, nb_tensor *const *in, void *g) {
    NB_HERE(ctx); return nb_gpt_loss(ctx, g, in[0], in[1], NULL);
}

static nb_tensor *gpt(nb_ctx *ctx, nb_ctx *params, nb_tape_html_opts *page) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    static nb_gpt g;
    nb_gpt_config cfg = {.arch = NB_GPT_GPTMODEL, .vocab_size = 12, .block_size = 4,
                         .n_layer = 2, .n_head = 2, .n_embd = 8, .dropout = 0.0,
                         .qkv_bias = false, .dtype = NB_F64};
    if (nb_gpt_init(params, &g, &cfg, &rng)) return NULL;
    for (int i = 0; i < cfg.n_layer; i++) g.blocks[i].att.use_fused = false;
    nb_tensor *ids = nb_empty(ctx, NB_I64, NB_SHAPE(1, 4));
    nb_tensor *targets = nb_empty(ctx, NB_I64, NB_SHAPE(1, 4));
    if (!ids || !targets) return NULL;
    const int64_t text[5] = {3, 1, 4, 1, 5};
    for (int k = 0; k < 4; k++) {
        ((int64_t *)ids->data)[k] = text[k];
        ((int64_t *)targets->data)[k] = text[k + 1];
    }
    ids->name = "ids", targets->name = "targets";
    static nb_tensor *in[2];
    in[0] = ids, in[1] = targets;
    page->forward = gpt_f, page->user = &g, page->n_in = 2, page->in = in;
    nb_tensor *L = gpt_f(ctx, in, &g);
    if (!L || nb_backward(ctx, L, NULL)) return NULL;
    L->name = "L";
    return L;
}

/* A 2-layer Qwen3 (the course's layout: d_model 8, 4 query heads of 4
 * reading 2 key/value heads, QK-norm, SiLU-gated MLP of 16, 4 tokens,
 * vocabulary 12), the attention op by op (use_fused false): the page draws
 * one map per query head, each with its key/value group. */
static nb_tensor *qwen3(nb_ctx *ctx, nb_ctx *params, nb_tape_html_opts *page) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    static nb_gpt g;
    nb_gpt_config cfg = {.arch = NB_GPT_QWEN3, .vocab_size = 12, .block_size = 4,
                         .n_layer = 2, .n_head = 4, .n_kv_head = 2, .head_dim = 4,
                         .n_embd = 8, .hidden_dim = 16, .norm_eps = 1e-6, .rope_theta = 1e6,
                         .qk_norm = true, .tie_head = true, .dropout = 0.0, .dtype = NB_F64};
    if (nb_gpt_init(params, &g, &cfg, &rng)) return NULL;
    g.use_fused = false;
    nb_tensor *ids = nb_empty(ctx, NB_I64, NB_SHAPE(1, 4));
    nb_tensor *targets = nb_empty(ctx, NB_I64, NB_SHAPE(1, 4));
    if (!ids || !targets) return NULL;
    const int64_t text[5] = {3, 1, 4, 1, 5};
    for (int k = 0; k < 4; k++) {
        ((int64_t *)ids->data)[k] = text[k];
        ((int64_t *)targets->data)[k] = text[k + 1];
    }
    ids->name = "ids", targets->name = "targets";
    static nb_tensor *in[2];
    in[0] = ids, in[1] = targets;
    page->forward = gpt_f, page->user = &g, page->n_in = 2, page->in = in;
    nb_tensor *L = gpt_f(ctx, in, &g);
    if (!L || nb_backward(ctx, L, NULL)) return NULL;
    L->name = "L";
    return L;
}

int main(int argc, char **argv) {
    teach_outputs out = {0};
    const char *model = "lecture";
    int status = parse_args(argc, argv, "teach_backprop", usage, &out, "model", &model);
    if (status >= 0) return status;
    if (strcmp(model, "lecture") && strcmp(model, "attention") && strcmp(model, "gpt") &&
        strcmp(model, "qwen3")) {
        fprintf(stderr, "teach_backprop: unknown --model '%s'\n%s", model, usage);
        return 2;
    }
    nb_ctx *ctx = nb_ctx_new(0), *params = nb_ctx_new(0);
    if (!ctx || !params) return finish(ctx, params, 1);
    nb_tensor *L = !strcmp(model, "lecture") ? lecture(ctx, &out.page)
                   : !strcmp(model, "attention") ? attention(ctx, params, &out.page)
                   : !strcmp(model, "gpt")       ? gpt(ctx, params, &out.page)
                                                 : qwen3(ctx, params, &out.page);
    if (!L) return finish(ctx, params, 1);
    if (strcmp(model, "lecture")) {
        nb_tape_print(ctx, stdout);
        printf("L = ");
        nb_print(L);
    }
    bool ok = write_outputs("teach_backprop", &out, ctx, L);
    return finish(ctx, params, ok ? 0 : 1);
}
