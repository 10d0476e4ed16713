/* nabla/nn.h - PyTorch-style modules: Linear, Dropout, Embedding, LayerNorm,
 * GELU, and the attention family of the seed notebooks (SelfAttention_v1,
 * SelfAttention_v2, CausalAttention, MultiHeadAttentionWrapper,
 * MultiHeadAttention), each computing exactly what the notebook's class does.
 *
 * A module is a plain struct you declare (by value) and initialise once:
 *
 *   nb_pcg32 rng;  nb_pcg32_seed(&rng, 123, 1);
 *   nb_ctx *params = nb_ctx_new(0);              // owns weights and names
 *   nb_nn_mha mha;
 *   if (nb_nn_mha_init(params, &mha, 3, 2, 6, 0.0, 2, false, NB_F32, &rng))
 *       fprintf(stderr, "%s\n", nb_ctx_error(params));
 *   nb_ctx *step = nb_ctx_new(0);                // reset every step
 *   nb_tensor *y = nb_nn_mha_forward(step, &mha, x);   // x (B, T, 3) -> (B, T, 2)
 *
 * Init. nb_nn_<thing>_init(pctx, m, <PyTorch's constructor arguments>, dt,
 * rng) creates the parameters in the long-lived context `pctx` (first, as in
 * every function that takes a context) as leaves that require grad, in dtype
 * dt (F32 or F64), and draws their values from rng in PyTorch's order (weight
 * then bias, child modules in construction order). Values differ from
 * PyTorch's for the same seed (PCG32 is not PyTorch's generator); to
 * reproduce PyTorch, load its weights with nb_params_copy_from. Modules
 * without parameters omit dt (Dropout, GELU) and rng when nothing is drawn
 * (LayerNorm, GELU). On bad arguments init records the error on pctx
 * ("MultiHeadAttention: d_out 5 is not divisible by num_heads 2") and returns
 * its status; a NULL pctx gives NB_ERR_NULL, and a pctx that already holds an
 * error gives its status at once (nothing is done). Init clears *m first.
 * Nothing needs freeing: everything lives in pctx (a params list never passes
 * NB_LIST_MAX entries for these modules; a list you grow past that with
 * nb_params_add_prefixed needs nb_list_free).
 *
 * params. Every module fills `params` with its parameters under PyTorch's
 * named_parameters() names and order ("W_query.weight", "out_proj.bias",
 * "heads.1.W_key.weight", ...). Buffers are not parameters: the causal
 * "mask" that the seed classes register (and that appears in their
 * state_dict) has no tensor here; nb_causal_fill computes it.
 *
 * training. true after init, like PyTorch. nb_nn_<thing>_train(m, on) sets it
 * on the module and its children (PyTorch's .train(on) / .eval()); a NULL m
 * is a no-op. Only dropout looks at it: in eval mode dropout is the identity.
 *
 * Forward. nb_nn_<thing>_forward(ctx, m, x) records on the step context ctx
 * and returns a new tensor there. Errors follow the op error model: NULL,
 * with the first error kept on ctx, naming the module as PyTorch names the
 * class ("CausalAttention: x has shape (2, 7, 3) but context_length is 6").
 * A NULL ctx returns NULL; a ctx that already holds an error returns NULL at
 * once. x must have the parameters' dtype.
 *
 * Randomness. Dropout keeps the rng pointer it was given at init (the
 * analogue of PyTorch's global generator) and draws its masks from it; the
 * attention modules hand their rng to their Dropout child. Re-seed that rng
 * to replay a mask. */
#ifndef NABLA_NN_H
#define NABLA_NN_H

#include "core.h"
#include "ops.h"
#include "random.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter lists ------------------------------------------------------ */

/* Sets the gradient of every tensor in the list to zero (optimizer.zero_grad;
 * PyTorch >= 2 sets them to None instead, which sums the same). NULL is a
 * no-op. */
void nb_params_zero_grad(const nb_tensor_list *params);

/* Copies values into dst's tensors from the tensors of src with the same
 * names (PyTorch's load_state_dict with strict key matching on dst's side):
 * every name of dst must be in src with the same shape; names only in src
 * are ignored (a PyTorch state_dict also holds buffers such as "mask").
 * Converts between F32 and F64. Nothing is copied unless every tensor fits.
 * Gradients are left alone. Returns NB_OK, or NB_ERR_NULL / NB_ERR_VALUE
 * (missing name) / NB_ERR_SHAPE / NB_ERR_DTYPE, recording the message
 * ("params_copy_from: 'W_key.weight' has shape (2, 3) here but (3, 2) in the
 * source") on the context that owns dst's first tensor (the function has no
 * context argument: the parameters' own context takes the message). With no
 * such tensor (dst NULL or empty, or its first entry NULL) the message has
 * nowhere to go: the status alone. */
nb_status nb_params_copy_from(const nb_tensor_list *dst, const nb_tensor_list *src);

/* Appends every (name, t) of src to dst as ("<prefix>.<name>", t), the names
 * allocated in pctx: how a module lists its children's parameters (PyTorch's
 * dotted state_dict names). Each tensor's `name` becomes its new list name,
 * so the tape's pictures label it with its module path ("out_proj.bias").
 * Returns NB_OK or the error (also recorded on pctx, except NB_ERR_NULL for a
 * NULL pctx); a pctx already holding an error gives its status, nothing
 * appended. */
nb_status nb_params_add_prefixed(nb_ctx *pctx, nb_tensor_list *dst, const char *prefix,
                                 const nb_tensor_list *src);

/* ---- Linear ----------------------------------------------------------------- */

/* nn.Linear(in_features, out_features, bias): y = x @ weight^T + bias.
 * weight and bias ~ U(-1/sqrt(in), 1/sqrt(in)), which is what PyTorch's
 * kaiming_uniform_(a=sqrt(5)) and its bias rule give. */
typedef struct nb_nn_linear {
    int64_t in_features, out_features;
    nb_tensor *weight;     /* (out_features, in_features) */
    nb_tensor *bias;       /* (out_features), or NULL without bias */
    nb_tensor_list params; /* "weight", ["bias"] */
    bool training;
} nb_nn_linear;

nb_status nb_nn_linear_init(nb_ctx *pctx, nb_nn_linear *m, int64_t in_features,
                            int64_t out_features, bool bias, nb_dtype dt, nb_pcg32 *rng);
/* x (..., in_features) -> (..., out_features) */
nb_tensor *nb_nn_linear_forward(nb_ctx *ctx, nb_nn_linear *m, nb_tensor *x);
void nb_nn_linear_train(nb_nn_linear *m, bool on);

/* ---- Dropout ---------------------------------------------------------------- */

/* nn.Dropout(p). In training mode zeroes each element with probability p
 * (mask drawn from rng) and scales the rest by 1/(1-p); in eval mode, or
 * with p == 0, returns x itself. rng may be NULL only when p == 0. */
typedef struct nb_nn_dropout {
    double p;
    nb_pcg32 *rng;         /* not owned; must outlive the module's use */
    nb_tensor_list params; /* empty */
    bool training;
} nb_nn_dropout;

nb_status nb_nn_dropout_init(nb_ctx *pctx, nb_nn_dropout *m, double p, nb_pcg32 *rng);
/* x any shape -> same shape */
nb_tensor *nb_nn_dropout_forward(nb_ctx *ctx, nb_nn_dropout *m, nb_tensor *x);
void nb_nn_dropout_train(nb_nn_dropout *m, bool on);

/* ---- Embedding -------------------------------------------------------------- */

/* nn.Embedding(num_embeddings, embedding_dim): weight ~ N(0, 1). (No
 * padding_idx, max_norm or sparse gradients.) */
typedef struct nb_nn_embedding {
    int64_t num_embeddings, embedding_dim;
    nb_tensor *weight;     /* (num_embeddings, embedding_dim) */
    nb_tensor_list params; /* "weight" */
    bool training;
} nb_nn_embedding;

nb_status nb_nn_embedding_init(nb_ctx *pctx, nb_nn_embedding *m, int64_t num_embeddings,
                               int64_t embedding_dim, nb_dtype dt, nb_pcg32 *rng);
/* ids (I64, any shape up to 3 dims, values in [0, num_embeddings)) ->
 * ids.shape + (embedding_dim) */
nb_tensor *nb_nn_embedding_forward(nb_ctx *ctx, nb_nn_embedding *m, const nb_tensor *ids);
void nb_nn_embedding_train(nb_nn_embedding *m, bool on);

/* ---- LayerNorm -------------------------------------------------------------- */

/* nn.LayerNorm(dim, eps, elementwise_affine) over the last dim (an int
 * normalized_shape): weight 1, bias 0. PyTorch's defaults: eps 1e-5,
 * elementwise_affine true. */
typedef struct nb_nn_layer_norm {
    int64_t dim;
    double eps;
    nb_tensor *weight;     /* (dim), NULL without elementwise_affine */
    nb_tensor *bias;       /* (dim), NULL without elementwise_affine */
    nb_tensor_list params; /* "weight", "bias" (empty without affine) */
    bool training;
} nb_nn_layer_norm;

nb_status nb_nn_layer_norm_init(nb_ctx *pctx, nb_nn_layer_norm *m, int64_t dim, double eps,
                                bool elementwise_affine, nb_dtype dt);
/* x (..., dim) -> same shape */
nb_tensor *nb_nn_layer_norm_forward(nb_ctx *ctx, nb_nn_layer_norm *m, nb_tensor *x);
void nb_nn_layer_norm_train(nb_nn_layer_norm *m, bool on);

/* ---- RMSNorm ---------------------------------------------------------------- */

/* PyTorch 2.4's nn.RMSNorm(dim, eps, elementwise_affine) over the last dim
 * (an int normalized_shape): x / sqrt(mean(x^2) + eps) * weight, weight 1.
 * eps must be finite and > 0; PyTorch's eps=None is the dtype's epsilon
 * (FLT_EPSILON, DBL_EPSILON), Llama 3 uses 1e-5 and Qwen3 1e-6. */
typedef struct nb_nn_rms_norm {
    int64_t dim;
    double eps;
    nb_tensor *weight;     /* (dim), NULL without elementwise_affine */
    nb_tensor_list params; /* "weight" (empty without affine) */
    bool training;
} nb_nn_rms_norm;

nb_status nb_nn_rms_norm_init(nb_ctx *pctx, nb_nn_rms_norm *m, int64_t dim, double eps,
                              bool elementwise_affine, nb_dtype dt);
/* x (..., dim) -> same shape */
nb_tensor *nb_nn_rms_norm_forward(nb_ctx *ctx, nb_nn_rms_norm *m, nb_tensor *x);
void nb_nn_rms_norm_train(nb_nn_rms_norm *m, bool on);

/* ---- GELU ------------------------------------------------------------------- */

/* nn.GELU(approximate='none' | 'tanh'). */
typedef struct nb_nn_gelu {
    nb_gelu_approx approximate;
    nb_tensor_list params; /* empty */
    bool training;
} nb_nn_gelu;

nb_status nb_nn_gelu_init(nb_ctx *pctx, nb_nn_gelu *m, nb_gelu_approx approximate);
/* x any shape -> same shape */
nb_tensor *nb_nn_gelu_forward(nb_ctx *ctx, nb_nn_gelu *m, nb_tensor *x);
void nb_nn_gelu_train(nb_nn_gelu *m, bool on);

/* ---- SelfAttention_v1 ----------------------------------------------------- */

/* Seed 004's SelfAttention_v1(d_in, d_out): three raw matrices ~ U[0, 1)
 * (torch.rand), drawn W_query, W_key, W_value.
 *   keys = x @ W_key; values = x @ W_value; queries = x @ W_query
 *   context = softmax(queries @ keys^T / sqrt(d_out)) @ values */
typedef struct nb_nn_self_attention_v1 {
    int64_t d_in, d_out;
    nb_tensor *W_query, *W_key, *W_value; /* each (d_in, d_out) */
    nb_tensor_list params;                /* "W_query", "W_key", "W_value" */
    bool training;
} nb_nn_self_attention_v1;

nb_status nb_nn_self_attention_v1_init(nb_ctx *pctx, nb_nn_self_attention_v1 *m, int64_t d_in,
                                       int64_t d_out, nb_dtype dt, nb_pcg32 *rng);
/* x (T, d_in) -> (T, d_out). Two-dimensional, as the seed (keys.T). */
nb_tensor *nb_nn_self_attention_v1_forward(nb_ctx *ctx, nb_nn_self_attention_v1 *m,
                                           nb_tensor *x);
void nb_nn_self_attention_v1_train(nb_nn_self_attention_v1 *m, bool on);

/* ---- SelfAttention_v2 ----------------------------------------------------- */

/* Seed 004's SelfAttention_v2(d_in, d_out, qkv_bias): the same with three
 * Linear(d_in, d_out, bias=qkv_bias), built W_query, W_key, W_value. */
typedef struct nb_nn_self_attention_v2 {
    int64_t d_in, d_out;
    nb_nn_linear W_query, W_key, W_value;
    nb_tensor_list params; /* "W_query.weight", ["W_query.bias"], "W_key.weight", ... */
    bool training;
} nb_nn_self_attention_v2;

nb_status nb_nn_self_attention_v2_init(nb_ctx *pctx, nb_nn_self_attention_v2 *m, int64_t d_in,
                                       int64_t d_out, bool qkv_bias, nb_dtype dt,
                                       nb_pcg32 *rng);
/* x (T, d_in) -> (T, d_out) */
nb_tensor *nb_nn_self_attention_v2_forward(nb_ctx *ctx, nb_nn_self_attention_v2 *m,
                                           nb_tensor *x);
void nb_nn_self_attention_v2_train(nb_nn_self_attention_v2 *m, bool on);

/* ---- CausalAttention ------------------------------------------------------ */

/* Seed 004's CausalAttention(d_in, d_out, context_length, dropout, qkv_bias):
 *   keys, values, queries = W_key(x), W_value(x), W_query(x)   (B, T, d_out)
 *   scores = queries @ keys^T                                  (B, T, T)
 *   scores[i][j] = -inf for j > i           (the first T x T of the mask)
 *   weights = dropout(softmax(scores / sqrt(d_out)))
 *   context = weights @ values                                 (B, T, d_out)
 * use_fused: as MultiHeadAttention's, with one head of d_out. */
typedef struct nb_nn_causal_attention {
    int64_t d_in, d_out, context_length;
    nb_nn_linear W_query, W_key, W_value;
    nb_nn_dropout dropout;
    nb_tensor_list params; /* "W_query.weight", ["W_query.bias"], "W_key.weight", ... */
    bool training;
    bool use_fused; /* true after init: see MultiHeadAttention's use_fused */
} nb_nn_causal_attention;

nb_status nb_nn_causal_attention_init(nb_ctx *pctx, nb_nn_causal_attention *m, int64_t d_in,
                                      int64_t d_out, int64_t context_length, double dropout,
                                      bool qkv_bias, nb_dtype dt, nb_pcg32 *rng);
/* x (B, T, d_in) with T <= context_length -> (B, T, d_out) */
nb_tensor *nb_nn_causal_attention_forward(nb_ctx *ctx, nb_nn_causal_attention *m,
                                          nb_tensor *x);
/* The same with an optional key-padding mask (BOOL (B, T), true = that key
 * is padding and gets no attention, nn.MultiheadAttention's convention; NULL
 * = none). A query whose visible keys are all masked gets all-zero weights
 * (nb_softmax's rule) instead of NaN. If attn_weights is not NULL it
 * receives the softmax output before dropout, (B, T, T). */
nb_tensor *nb_nn_causal_attention_forward_masked(nb_ctx *ctx, nb_nn_causal_attention *m,
                                                 nb_tensor *x, const nb_tensor *key_padding_mask,
                                                 nb_tensor **attn_weights);
void nb_nn_causal_attention_train(nb_nn_causal_attention *m, bool on);

/* ---- MultiHeadAttentionWrapper -------------------------------------------- */

/* Seed 004's MultiHeadAttentionWrapper(d_in, d_out, context_length, dropout,
 * num_heads, qkv_bias): num_heads CausalAttention heads (built in order,
 * each drawing its own weights), outputs concatenated on the last dim. */
typedef struct nb_nn_mha_wrapper {
    int64_t d_in, d_out, context_length;
    int num_heads;
    nb_nn_causal_attention *heads; /* num_heads heads, allocated in pctx */
    nb_tensor_list params;         /* "heads.0.W_query.weight", ... */
    bool training;
} nb_nn_mha_wrapper;

nb_status nb_nn_mha_wrapper_init(nb_ctx *pctx, nb_nn_mha_wrapper *m, int64_t d_in, int64_t d_out,
                                 int64_t context_length, double dropout, int num_heads,
                                 bool qkv_bias, nb_dtype dt, nb_pcg32 *rng);
/* x (B, T, d_in) -> (B, T, num_heads * d_out) */
nb_tensor *nb_nn_mha_wrapper_forward(nb_ctx *ctx, nb_nn_mha_wrapper *m, nb_tensor *x);
void nb_nn_mha_wrapper_train(nb_nn_mha_wrapper *m, bool on);

/* ---- MultiHeadAttention --------------------------------------------------- */

/* Seed 004's MultiHeadAttention(d_in, d_out, context_length, dropout,
 * num_heads, qkv_bias), head_dim = d_out / num_heads:
 *   q, k, v = W_query(x), W_key(x), W_value(x)      (B, T, d_out)
 *   view (B, T, H, head_dim), transpose(1, 2) ->    (B, H, T, head_dim)
 *   scores = q @ k.transpose(2, 3), causal -inf ->  (B, H, T, T)
 *   weights = dropout(softmax(scores / sqrt(head_dim)))
 *   (weights @ v).transpose(1, 2).view(B, T, d_out), then out_proj.
 * Children are built W_query, W_key, W_value, out_proj (Linear(d_out, d_out)
 * with bias), so the rng draws go in that order.
 *
 * use_fused (true after init) computes the lines from the view to the merge
 * in one nb_sdpa op: the same values to rounding, no (B, H, T, T) weights
 * stored, no head transposes. Its dropout mask is not nb_dropout's: each
 * train-mode forward draws a 64-bit seed from the Dropout's rng (two
 * nb_pcg32_next calls, high word first) and nb_sdpa derives the mask from
 * it. Set use_fused = false for the seed's composed ops (matmul,
 * causal_fill, masked_fill, scale, softmax, dropout, matmul), each on the
 * tape: for teaching, as the reference, or to replay nb_dropout's mask. A
 * forward that asks for attn_weights always takes the composed path. */
typedef struct nb_nn_mha {
    int64_t d_in, d_out, context_length, head_dim;
    int num_heads;
    nb_nn_linear W_query, W_key, W_value;
    nb_nn_dropout dropout;
    nb_nn_linear out_proj;
    nb_tensor_list params; /* W_query.weight, [W_query.bias], W_key..., W_value...,
                              out_proj.weight, out_proj.bias */
    bool training;
    bool use_fused; /* true after init: nb_sdpa; false: the composed ops */
} nb_nn_mha;

nb_status nb_nn_mha_init(nb_ctx *pctx, nb_nn_mha *m, int64_t d_in, int64_t d_out,
                         int64_t context_length, double dropout, int num_heads, bool qkv_bias,
                         nb_dtype dt, nb_pcg32 *rng);
/* x (B, T, d_in) with T <= context_length -> (B, T, d_out) */
nb_tensor *nb_nn_mha_forward(nb_ctx *ctx, nb_nn_mha *m, nb_tensor *x);
/* With an optional key-padding mask, BOOL (B, T), true = padding (masked),
 * applied to every head and query after the causal mask; NULL = none. A
 * query whose visible keys are all padding gets zero weights, not NaN. If
 * attn_weights is not NULL it receives the softmax output before dropout,
 * (B, H, T, T), for inspection (it is part of the graph). */
nb_tensor *nb_nn_mha_forward_masked(nb_ctx *ctx, nb_nn_mha *m, nb_tensor *x,
                                    const nb_tensor *key_padding_mask, nb_tensor **attn_weights);
void nb_nn_mha_train(nb_nn_mha *m, bool on);

#ifdef __cplusplus
}
#endif
#endif
