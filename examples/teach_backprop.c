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
 * --model=gpt a tiny GPT block (LayerNorm, attention, MLP, residuals).
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
    "usage: teach_backprop [--model=lecture|attention|gpt] [--html=PAGE] [--dot=GRAPH]\n"
    "                      [--json=TAPE] [--force]\n"
    "Walks one backward pass op by op. Writes nothing unless asked:\n"
    "  --html=PAGE   the tape explorer: one self-contained HTML page\n"
    "  --dot=GRAPH   the tape as Graphviz (dot -Tsvg GRAPH -o tape.svg)\n"
    "  --json=TAPE   the tape's tensors and gradients as JSON\n"
    "  --force       replace those files if they exist\n"
    "  --model=NAME  lecture (default): mse_loss(softmax(tanh(x @ W)), target);\n"
    "                attention: the seeds' CausalAttention(3, 2) on six tokens;\n"
    "                gpt: a tiny GPT block, LayerNorm + attention + MLP\n";

/* The lecture's expression, with the walkthrough printed step by step. */
static nb_tensor *lecture(nb_ctx *ctx) {
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 3), (double[]){0.5, -1.0, 2.0, 1.5, 0.2, -0.3});
    nb_tensor *W = nb_requires_grad(
        nb_from_doubles(ctx, NB_F64, NB_SHAPE(3, 2), (double[]){0.1, -0.2, 0.4, 0.3, -0.5, 0.6}));
    nb_tensor *target = nb_from_doubles(ctx, NB_F64, NB_SHAPE(2, 2), (double[]){1, 0, 0, 1});
    if (!W) return NULL;
    x->name = "x", W->name = "W", target->name = "target";

    /* NB_HERE stamps the next ops with this file and line, for the tape. */
    NB_HERE(ctx); nb_tensor *a = nb_matmul(ctx, x, W);
    NB_HERE(ctx); nb_tensor *h = nb_tanh(ctx, a);
    NB_HERE(ctx); nb_tensor *p = nb_softmax(ctx, h);
    NB_HERE(ctx); nb_tensor *L = nb_mse_loss(ctx, p, target);
    if (!L) return NULL;
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
static nb_tensor *attention(nb_ctx *ctx, nb_ctx *params) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 1);
    nb_nn_causal_attention ca;
    if (nb_nn_causal_attention_init(params, &ca, 3, 2, 6, 0.0, false, NB_F64, &rng)) return NULL;
    ca.use_fused = false; /* the seed's ops one by one, each a step of the walk */
    load(params, &ca.params, 3, ref_ca_eval_names, ref_ca_eval_params);
    nb_tensor *x = nb_from_doubles(ctx, NB_F64, NB_SHAPE(1, 6, 3), inputs_data);
    if (!x) return NULL;
    x->name = "inputs";
    NB_HERE(ctx); nb_tensor *L = nb_mean(ctx, nb_nn_causal_attention_forward(ctx, &ca, x));
    if (!L || nb_backward(ctx, L, NULL)) return NULL;
    L->name = "L";
    return L;
}

/* A tiny GPT block, nanoGPT's Block with d_model 4, 2 heads, T 3:
 *   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x));  L = mean(x)
 * its parameters listed under transformer.h.0.* as nanoGPT names them. */
typedef struct gpt_block {
    nb_nn_layer_norm ln_1, ln_2;
    nb_nn_mha attn;
    nb_nn_linear c_fc, c_proj;
    nb_nn_gelu gelu;
    nb_tensor_list mlp, block, params;
} gpt_block;

static nb_status gpt_init(gpt_block *b, nb_ctx *pctx, nb_pcg32 *rng) {
    memset(b, 0, sizeof *b);
    nb_status s = nb_nn_layer_norm_init(pctx, &b->ln_1, 4, 1e-5, true, NB_F64);
    if (!s) s = nb_nn_mha_init(pctx, &b->attn, 4, 4, 3, 0.0, 2, true, NB_F64, rng);
    b->attn.use_fused = false; /* every op of the attention on the tape, to step through */
    if (!s) s = nb_nn_layer_norm_init(pctx, &b->ln_2, 4, 1e-5, true, NB_F64);
    if (!s) s = nb_nn_linear_init(pctx, &b->c_fc, 4, 16, true, NB_F64, rng);
    if (!s) s = nb_nn_gelu_init(pctx, &b->gelu, NB_GELU_TANH);
    if (!s) s = nb_nn_linear_init(pctx, &b->c_proj, 16, 4, true, NB_F64, rng);
    if (!s) s = nb_params_add_prefixed(pctx, &b->mlp, "c_fc", &b->c_fc.params);
    if (!s) s = nb_params_add_prefixed(pctx, &b->mlp, "c_proj", &b->c_proj.params);
    if (!s) s = nb_params_add_prefixed(pctx, &b->block, "ln_1", &b->ln_1.params);
    if (!s) s = nb_params_add_prefixed(pctx, &b->block, "attn", &b->attn.params);
    if (!s) s = nb_params_add_prefixed(pctx, &b->block, "ln_2", &b->ln_2.params);
    if (!s) s = nb_params_add_prefixed(pctx, &b->block, "mlp", &b->mlp);
    if (!s) s = nb_params_add_prefixed(pctx, &b->params, "transformer.h.0", &b->block);
    return s;
}

static nb_tensor *gpt(nb_ctx *ctx, nb_ctx *params) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 54);
    gpt_block b;
    if (gpt_init(&b, params, &rng)) return NULL;
    nb_tensor *x = nb_normal(ctx, NB_F64, NB_SHAPE(1, 3, 4), 0, 1, &rng);
    if (!x) return NULL;
    x->name = "x";
    NB_HERE(ctx);
    nb_tensor *h = nb_add(ctx, x, nb_nn_mha_forward(ctx, &b.attn, nb_nn_layer_norm_forward(ctx, &b.ln_1, x)));
    NB_HERE(ctx);
    nb_tensor *m = nb_nn_linear_forward(ctx, &b.c_fc, nb_nn_layer_norm_forward(ctx, &b.ln_2, h));
    NB_HERE(ctx);
    m = nb_nn_linear_forward(ctx, &b.c_proj, nb_nn_gelu_forward(ctx, &b.gelu, m));
    NB_HERE(ctx);
    nb_tensor *L = nb_mean(ctx, nb_add(ctx, h, m));
    if (!L || nb_backward(ctx, L, NULL)) return NULL;
    L->name = "L";
    return L;
}

int main(int argc, char **argv) {
    teach_outputs out = {0};
    const char *model = "lecture";
    int status = parse_args(argc, argv, "teach_backprop", usage, &out, "model", &model);
    if (status >= 0) return status;
    if (strcmp(model, "lecture") && strcmp(model, "attention") && strcmp(model, "gpt")) {
        fprintf(stderr, "teach_backprop: unknown --model '%s'\n%s", model, usage);
        return 2;
    }
    nb_ctx *ctx = nb_ctx_new(0), *params = nb_ctx_new(0);
    if (!ctx || !params) return finish(ctx, params, 1);
    nb_tensor *L = !strcmp(model, "lecture") ? lecture(ctx)
                   : !strcmp(model, "attention") ? attention(ctx, params)
                                                 : gpt(ctx, params);
    if (!L) return finish(ctx, params, 1);
    if (strcmp(model, "lecture")) {
        nb_tape_print(ctx, stdout);
        printf("L = ");
        nb_print(L);
    }
    bool ok = write_outputs("teach_backprop", &out, ctx, L);
    return finish(ctx, params, ok ? 0 : 1);
}
