/* tape/op_formula.c - every op's local backward rule as a one-line formula,
 * for the teaching views (the tape explorer shows it beside each step).
 * `dout` is the gradient arriving at the op's output, `out` its value; the
 * inputs are x, y (or the names the op's signature uses). Adding an op to
 * nb_op without a formula here fails to compile. */
#include "nb_internal.h"

static const char *const formulas[] = {
    [NB_OP_ADD] = "dx = dout,  dy = dout  (summed over broadcast dims)",
    [NB_OP_SUB] = "dx = dout,  dy = -dout  (summed over broadcast dims)",
    [NB_OP_MUL] = "dx = dout · y,  dy = dout · x",
    [NB_OP_DIV] = "dx = dout / y,  dy = -dout · x / y²",
    [NB_OP_NEG] = "dx = -dout",
    [NB_OP_SCALE] = "dx = c · dout",
    [NB_OP_ADD_SCALAR] = "dx = dout",
    [NB_OP_EXP] = "dx = dout · out  (out = exp(x))",
    [NB_OP_LOG] = "dx = dout / x",
    [NB_OP_SQRT] = "dx = dout / (2 · out)",
    [NB_OP_POW] = "dx = dout · p · x^(p-1)",
    [NB_OP_TANH] = "dx = dout · (1 - out²)",
    [NB_OP_SIGMOID] = "dx = dout · out · (1 - out)",
    [NB_OP_RELU] = "dx = dout · [x > 0]",
    [NB_OP_GELU] = "dx = dout · (Φ(x) + x · φ(x))  (the tanh form's derivative when approximate)",
    [NB_OP_SUM] = "dx = dout, copied to every element of x",
    [NB_OP_MEAN] = "dx = dout / numel(x), copied to every element",
    [NB_OP_SUM_DIM] = "dx = dout, copied along the summed dim",
    [NB_OP_MEAN_DIM] = "dx = dout / size(dim), copied along dim",
    [NB_OP_MAX_DIM] = "dx = dout at each arg-max, 0 elsewhere",
    [NB_OP_MATMUL] = "dA = dout @ Bᵀ,  dB = Aᵀ @ dout",
    [NB_OP_TRANSPOSE] = "dx = dout with the two dims swapped back",
    [NB_OP_PERMUTE] = "dx = dout permuted by the inverse permutation",
    [NB_OP_RESHAPE] = "dx = dout reshaped to x's shape",
    [NB_OP_CONTIGUOUS] = "dx = dout",
    [NB_OP_CONCAT] = "dxᵢ = the slice of dout that xᵢ filled",
    [NB_OP_SPLIT] = "dx = dout in this chunk's slice, 0 elsewhere",
    [NB_OP_MASKED_FILL] = "dx = dout where the mask is false, 0 where it filled",
    [NB_OP_CAUSAL_FILL] = "dx = dout on and below the diagonal, 0 above",
    [NB_OP_SOFTMAX] = "dx = out · (dout - Σ dout · out)  (per row)",
    [NB_OP_LOG_SOFTMAX] = "dx = dout - softmax(x) · Σ dout  (per row)",
    [NB_OP_CROSS_ENTROPY] = "dlogits = dout · (softmax(logits) - onehot(target)) / N",
    [NB_OP_MSE_LOSS] = "dx = dout · 2 (x - y) / numel,  dy = -dx",
    [NB_OP_LINEAR] = "dx = dout @ W,  dW = doutᵀ @ x,  db = Σ_rows dout",
    [NB_OP_DROPOUT] = "dx = dout · mask / (1 - p)",
    [NB_OP_EMBEDDING] = "dW[id] += dout's row, for each id",
    [NB_OP_LAYER_NORM] = ("g = dout · γ;  dx = (g - mean(g) - x̂ · mean(g · x̂)) / σ;  "
                          "dγ = Σ dout · x̂;  dβ = Σ dout"),
    [NB_OP_SDPA] = ("P = softmax(q·kᵀ·scale, masked);  dv = Pᵀ @ dout,  dP = dout @ vᵀ,  "
                    "dS = P · (dP - Σ dout · out),  dq = dS @ k · scale,  dk = dSᵀ @ q · scale"),
    [NB_OP_CUSTOM] = "the user's backward function (nb_record)",
};
_Static_assert(sizeof(formulas) / sizeof(formulas[0]) == NB_OP_COUNT,
               "every nb_op needs a formula");

const char *nb_op_formula(nb_op op) {
    return (op >= 0 && op < NB_OP_COUNT && formulas[op]) ? formulas[op] : "?";
}
