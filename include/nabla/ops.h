/* nabla/ops.h - differentiable tensor ops.
 *
 * Every op takes the context that records it first, returns a new tensor in
 * that context, and has a backward rule in float32 and float64. Every op
 * returns NULL (recording an error that names the op and the shapes) when an
 * input is NULL, its dtype is not floating or differs from the others, or the
 * shapes do not fit; and returns NULL at once when the context already holds
 * an error. Inputs may live in any context (parameters usually live in a
 * long-lived one).
 *
 * Semantics follow PyTorch; where nabla differs, the comment says so. */
#ifndef NABLA_OPS_H
#define NABLA_OPS_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Op identifiers: NB_OP_<ID> for each row of ops.def, in its order, then
 * NB_OP_CUSTOM (ops recorded by nb_record) and the count. */
typedef enum nb_op {
#define NB_OP(id, name, n_in, formula, ...) NB_OP_##id,
#include "ops.def"
#undef NB_OP
    NB_OP_CUSTOM,
    NB_OP_COUNT
} nb_op;

/* "add", "matmul", ...; "?" for values out of range. */
const char *nb_op_name(nb_op op);
/* Number of tensor inputs (-1: variable, as concat; 0 for values out of
 * range). */
int nb_op_arity(nb_op op);

/* ---- elementwise, broadcasting by the numpy/PyTorch rules ------------- */
/* Shapes are aligned from the right; each pair of dims must be equal or one
 * of them 1. The result has the broadcast shape; backward sums the gradient
 * over the broadcast dims. */
nb_tensor *nb_add(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_sub(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_mul(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);
nb_tensor *nb_div(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);

/* ---- elementwise, one input --------------------------------------------- */
nb_tensor *nb_neg(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_scale(nb_ctx *ctx, nb_tensor *a, double s);      /* a * s */
nb_tensor *nb_add_scalar(nb_ctx *ctx, nb_tensor *a, double s); /* a + s */
nb_tensor *nb_exp(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_log(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_sqrt(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_pow(nb_ctx *ctx, nb_tensor *a, double p); /* a ** p */
nb_tensor *nb_tanh(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_sigmoid(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_relu(nb_ctx *ctx, nb_tensor *a); /* gradient 0 at 0, as PyTorch */
nb_tensor *nb_erf(nb_ctx *ctx, nb_tensor *a); /* the error function, torch.erf */

typedef enum nb_gelu_approx { NB_GELU_NONE, NB_GELU_TANH } nb_gelu_approx;
/* PyTorch's gelu(approximate='none') = x * Phi(x) with erf, or 'tanh'. */
nb_tensor *nb_gelu(nb_ctx *ctx, nb_tensor *a, nb_gelu_approx approx);
/* x * sigmoid(x), F.silu (Llama's and Qwen's gated MLP) */
nb_tensor *nb_silu(nb_ctx *ctx, nb_tensor *a);
/* relu(x)^2, the nanoGPT speedrun's MLP activation; gradient 2 relu(x) */
nb_tensor *nb_relu2(nb_ctx *ctx, nb_tensor *a);

/* ---- reductions ---------------------------------------------------------- */
/* Over all elements: a 0-dim result. */
nb_tensor *nb_sum(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_mean(nb_ctx *ctx, nb_tensor *a);
/* Along `dim` (negative counts from the end). keepdim keeps it as size 1. */
nb_tensor *nb_sum_dim(nb_ctx *ctx, nb_tensor *a, int dim, bool keepdim);
nb_tensor *nb_mean_dim(nb_ctx *ctx, nb_tensor *a, int dim, bool keepdim);
/* Max values along `dim`; if `indices` is not NULL it receives an I64
 * tensor of the arg-max (first one on ties). The gradient flows to that
 * element only, as in PyTorch's max(dim). */
nb_tensor *nb_max_dim(nb_ctx *ctx, nb_tensor *a, int dim, bool keepdim, nb_tensor **indices);
/* The k largest values of x along `dim`, largest first: torch.topk(x, k,
 * dim) (largest, sorted). If `indices` is not NULL it receives their I64
 * positions along dim. Equal values come in the order of their position
 * (lower first) and a NaN above every number; PyTorch returns the same
 * values but leaves the order of equal ones to its selection algorithm, so
 * its indices may differ on ties. The gradient flows to the chosen
 * elements. 0 <= k <= x.shape[dim], else an error. */
nb_tensor *nb_topk(nb_ctx *ctx, nb_tensor *x, int k, int dim, nb_tensor **indices);
/* Rows of x (N, ...) picked by idx (I64, (M), values in [0, N)) -> (M, ...):
 * x.index_select(0, idx). Backward adds each row's gradient back to row
 * idx[p] (an index_add). */
nb_tensor *nb_index_select(nb_ctx *ctx, nb_tensor *x, const nb_tensor *idx);
/* base (N, ...) with row p of src (M, ...) added to row idx[p] (I64, (M),
 * values in [0, N)); repeated ids add up, in the order of idx, to the same
 * bits on any number of threads: base.index_add(0, idx, src), a new tensor.
 * For a sum into zeros pass nb_zeros as base (a constant). */
nb_tensor *nb_index_add(nb_ctx *ctx, nb_tensor *base, const nb_tensor *idx, nb_tensor *src);

/* ---- matrix product -------------------------------------------------------- */
/* torch.matmul. (n,k) @ (k,m) -> (n,m). With 3 to 8 dims, the last two
 * are the matrices and the leading (batch) dims broadcast: (B,H,T,D) @
 * (B,H,D,T), or (B,T,C) @ (C,K). A 1-D operand is a vector: on the left
 * (k) @ (..., k, m) -> (..., m), a row (1, k) whose dim is then dropped; on
 * the right (..., n, k) @ (k) -> (..., n), a column (k, 1), likewise; (k) @
 * (k) is their dot product, a 0-dim tensor. A 0-dim operand is an error. */
nb_tensor *nb_matmul(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);

/* ---- shape ops -------------------------------------------------------------- */
/* nabla tensors are always contiguous, so transpose and permute copy (PyTorch
 * returns a strided view; values and gradients are the same). */
nb_tensor *nb_transpose(nb_ctx *ctx, nb_tensor *a, int dim0, int dim1);
nb_tensor *nb_permute(nb_ctx *ctx, nb_tensor *a, const int *perm); /* perm has a->ndim entries */
/* A view with a new shape and the same data; one entry may be -1. */
nb_tensor *nb_reshape(nb_ctx *ctx, nb_tensor *a, int ndim, const int64_t *shape);
#define nb_view nb_reshape
/* A copy (always already contiguous; kept for PyTorch-shaped code). */
nb_tensor *nb_contiguous(nb_ctx *ctx, nb_tensor *a);
/* Joins n tensors along `dim`; all other dims must match. */
nb_tensor *nb_concat(nb_ctx *ctx, int n, nb_tensor *const *ts, int dim);
/* Splits `a` along `dim` into n pieces of sizes[i] (which must add up to
 * that dim), writing them to out[0..n-1]. Returns NB_OK or the error. */
nb_status nb_split(nb_ctx *ctx, nb_tensor *a, int dim, int n, const int64_t *sizes,
                   nb_tensor **out);

/* ---- masking and softmax ---------------------------------------------------- */
/* Where mask (BOOL, broadcastable to a's shape) is true, the result is
 * `value` (use -INFINITY for attention); elsewhere a. Gradient is zero at
 * filled places. */
nb_tensor *nb_masked_fill(nb_ctx *ctx, nb_tensor *a, const nb_tensor *mask, double value);
/* The causal triangle on the last two dims (T1, T2): element (i, j) with
 * j > i is set to `value`, like masked_fill(triu(ones, diagonal=1)). */
nb_tensor *nb_causal_fill(nb_ctx *ctx, nb_tensor *a, double value);

/* Softmax and log-softmax along the last dim, max-subtracted. A row whose
 * entries are all -inf (fully masked) gives all zeros in softmax and all -inf
 * in log_softmax, with zero gradient, instead of PyTorch's NaN: a padded
 * query then attends to nothing rather than poisoning the step. */
nb_tensor *nb_softmax(nb_ctx *ctx, nb_tensor *a);
nb_tensor *nb_log_softmax(nb_ctx *ctx, nb_tensor *a);

/* ---- losses ------------------------------------------------------------------ */
/* Mean cross-entropy of logits (..., C) against targets (...) of class
 * indices (I64 in [0, C)): every leading position is one sample, so (N, C)
 * with (N), (B, T, C) with (B, T) (PyTorch would need a view to (B*T, C)),
 * and (C) with a 0-dim target all work. A 0-dim result, like
 * F.cross_entropy(logits.view(-1, C), targets.view(-1)). Fused and
 * max-subtracted: large logits do not overflow. Only logits get a gradient,
 * (softmax - onehot) / N. A target out of range is an NB_ERR_VALUE naming
 * its index and value; non-I64 targets are NB_ERR_DTYPE; targets whose shape
 * is not logits' without the last dim are NB_ERR_SHAPE. */
nb_tensor *nb_cross_entropy(nb_ctx *ctx, nb_tensor *logits, const nb_tensor *targets);
/* mean((a - b)^2); shapes must be equal. Like F.mse_loss. */
nb_tensor *nb_mse_loss(nb_ctx *ctx, nb_tensor *a, nb_tensor *b);

/* ---- neural-network ops (the modules in nabla/nn.h use these) ------------- */
struct nb_pcg32;
/* x (..., in) @ w(out, in)^T + b(out) -> (..., out). b may be NULL. Like
 * F.linear. */
nb_tensor *nb_linear(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b);
/* A linear per group of rows, as one op: x (M, K) holds n groups of rows
 * one after another (rows[g] of group g, summing to M), w[g] (N, K) ->
 * (M, N), group g's rows times w[g]^T, without bias. A mixture of experts'
 * expert products: the threads split all groups' rows at once rather than
 * each small product. A group of 0 rows adds nothing to its weight's
 * gradient. */
nb_tensor *nb_grouped_linear(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w,
                             const int64_t *rows);
/* With train false or p == 0: the identity (returns x itself, records
 * nothing). Otherwise zeroes each element with probability p, drawing the
 * mask from rng, and scales survivors by 1/(1-p); p == 1 zeroes everything.
 * Backward reuses the mask. p outside [0, 1] is an error. */
nb_tensor *nb_dropout(nb_ctx *ctx, nb_tensor *x, double p, bool train, struct nb_pcg32 *rng);
/* Rows of weight (num, dim) picked by ids (I64, any shape, values in
 * [0, num)) -> ids.shape + (dim). Like F.embedding. */
nb_tensor *nb_embedding(nb_ctx *ctx, nb_tensor *weight, const nb_tensor *ids);
/* Normalises over the last dim: (x - mean) / sqrt(var + eps) * w + b, with
 * the biased variance. w and b (dim) may be NULL. Like F.layer_norm. */
nb_tensor *nb_layer_norm(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b, double eps);
/* Root-mean-square norm over the last dim: x / sqrt(mean(x^2) + eps) * w,
 * w (dim) may be NULL; eps finite and > 0. Like PyTorch 2.4's F.rms_norm
 * (whose eps=None is the dtype's epsilon: pass FLT_EPSILON, DBL_EPSILON). */
nb_tensor *nb_rms_norm(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, double eps);

/* ---- fused attention -------------------------------------------------------- */
/* Scaled dot-product attention in one op, PyTorch's
 * F.scaled_dot_product_attention(q', k', v', mask, dropout_p, is_causal,
 * scale) with q' = q.transpose(1, 2) (and k', v'), output transposed back
 * and heads merged:
 *
 *   q (B, Tq, H, hd), k (B, Tk, Hkv, hd), v (B, Tk, Hkv, hdv) -> (B, Tq, H * hdv)
 *   w[b,h,i,:] = softmax_j(scale * q[b,i,h,:] . k[b,j,g,:]), key j hidden
 *                (weight 0) when causal and j > i, or key_padding_mask[b, j]
 *   out[b, i, h*hdv : (h+1)*hdv] = sum_j dropout(w[b,h,i,j]) v[b,j,g,:]
 *   with g = h / (H / Hkv)
 *
 * Hkv == H is multi-head attention; Hkv < H (dividing H) is grouped-query
 * attention, each key/value head shared by H / Hkv consecutive query heads
 * (read in place, as PyTorch's reference with k and v repeat_interleave'd
 * H / Hkv times on the heads dim); Hkv == 1 is multi-query attention.
 *
 * q, k, v are the (B, T, H * hd) outputs of Linear layers viewed as
 * (B, T, H, hd) (nb_view: no copy); the output is what out_proj reads.
 * key_padding_mask: BOOL (B, Tk), true = that key is padding (NULL: none).
 * scale: usually 1 / sqrt(hd). dropout_p in [0, 1]: each weight is zeroed
 * with probability p and the rest scaled by 1 / (1 - p), with the mask
 * nb_sdpa_dropout_mask(.., p, seed) gives; pass 0 in eval mode (as with
 * PyTorch's dropout_p, there is no train flag). The same seed gives the same
 * mask; draw a fresh seed per step.
 *
 * Computed flash-attention style: the (Tq, Tk) weights are never stored
 * (backward recomputes them from a saved log-sum-exp per query row, and
 * regenerates the dropout mask from the seed), and tiles the masks hide
 * completely are skipped. A query that sees no key gets zeros and zero
 * gradient, as nb_softmax gives a fully masked row. The composed ops
 * (matmul, causal_fill, masked_fill, scale, softmax, dropout, matmul) give
 * the same values to rounding. Gradients flow to q, k and v (which may be
 * the same tensor). Errors name q, k, v and their shapes. */
nb_tensor *nb_sdpa(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                   const nb_tensor *key_padding_mask, bool causal, double scale,
                   double dropout_p, uint64_t seed);
/* nb_sdpa's options for nb_sdpa_ex; zero-initialised fields are the
 * defaults, so name only what differs:
 *   nb_sdpa_ex(ctx, q, k, v, &(nb_sdpa_opts){.causal = true, .window = 256})
 * scale 0 means 1 / sqrt(hd) (PyTorch's scale=None; nb_sdpa takes any
 * finite scale). window > 0 (needs causal) is a sliding window: query i
 * sees only keys j with i - window < j <= i, the last `window` keys up to
 * itself (Mistral's rule; window >= Tk hides nothing more than causal);
 * 0 is no window, a negative one an error. */
typedef struct nb_sdpa_opts {
    const nb_tensor *key_padding_mask; /* BOOL (B, Tk) or NULL */
    bool causal;
    double scale;     /* 0: 1 / sqrt(hd) */
    double dropout_p; /* in [0, 1] */
    uint64_t seed;    /* the dropout mask's */
    int64_t window;   /* 0: none; > 0: keys i - window < j <= i */
} nb_sdpa_opts;
/* nb_sdpa with the options in a struct, and a sliding window. opts NULL is
 * all defaults (no mask, not causal, scale 1 / sqrt(hd), no dropout). */
nb_tensor *nb_sdpa_ex(nb_ctx *ctx, nb_tensor *q, nb_tensor *k, nb_tensor *v,
                      const nb_sdpa_opts *opts);
/* The dropout keep mask nb_sdpa uses for (B = batch, H = heads, Tq, Tk, p,
 * seed): a new BOOL (batch, heads, t_q, t_k) tensor in ctx, true = kept.
 * Row i of head (b, h) is PCG32 seeded (seed, (b * heads + h) * t_q + i);
 * key j is kept when its j-th draw >> 8 is >= ceil(p * 2^24) (nb_dropout's
 * rule). All true for p == 0, all false for p == 1. NULL with an error for
 * p outside [0, 1] or bad sizes. */
nb_tensor *nb_sdpa_dropout_mask(nb_ctx *ctx, int64_t batch, int64_t heads, int64_t t_q,
                                int64_t t_k, double p, uint64_t seed);

/* ---- rotary position embeddings ------------------------------------------- */
/* nb_rope's flags, or'ed; 0 is Hugging Face's and the course's RoPE on
 * (..., T, head_dim). */
typedef enum nb_rope_flags {
    /* Pairs (x[2i], x[2i+1]) in place of (x[i], x[i + hd/2]): RoFormer's and
     * Meta's reference Llama code's pairing. The same tables: the rotation
     * nb_rope applies to x's last dim read as its even then its odd entries. */
    NB_ROPE_INTERLEAVED = 1,
    /* x is (..., T, H, hd), the positions on dim -3: the layout of the Q/K
     * projections viewed as heads, which nb_sdpa reads (no permute copy). */
    NB_ROPE_THD = 2
} nb_rope_flags;

/* Rotary position embedding, as Hugging Face's apply_rotary_pos_emb:
 *
 *   x (..., T, hd), cos and sin (max_T, hd) -> (..., T, hd)
 *   out[..., t, :] = x[..., t, :] * cos[pos0 + t] + rotate_half(x[..., t, :]) * sin[pos0 + t]
 *   rotate_half(v) = cat(-v[hd/2:], v[:hd/2])
 *
 * so pair (x[i], x[i + hd/2]) at position p turns by the angle the tables
 * hold (from nb_rope_tables: cos[p, i] = cos[p, i + hd/2] = cos(p f_i)). Rows
 * pos0 .. pos0 + T - 1 of the tables are read: pos0 is the position of x's
 * first row (the length of a KV cache). flags: 0 or NB_ROPE_INTERLEAVED and
 * NB_ROPE_THD, or'ed. The tables are constants (no gradient reaches them;
 * tables that require grad are an error); the gradient of x is dout turned
 * back, by the transposed rotation. Any tables of the shape work (the formula
 * above is the op, rotation or not). Errors, naming rope: an odd hd; tables
 * not (max_T, hd) of x's dtype or with fewer than pos0 + T rows; pos0 < 0;
 * unknown flags. */
nb_tensor *nb_rope(nb_ctx *ctx, nb_tensor *x, const nb_tensor *cos, const nb_tensor *sin,
                   int64_t pos0, unsigned flags);

/* Llama 3's frequency scaling (a Hugging Face config's rope_scaling with
 * rope_type "llama3"; Llama 3.2 1B: factor 32, low_freq_factor 1,
 * high_freq_factor 4, original_max_position_embeddings 8192). With
 * wavelength w_i = 2 pi / f_i and L = original_max_position_embeddings:
 * w_i > L / low_freq_factor: f_i / factor; w_i < L / high_freq_factor:
 * f_i unchanged; between: (1 - s) f_i / factor + s f_i with
 * s = (L / w_i - low_freq_factor) / (high_freq_factor - low_freq_factor). */
typedef struct nb_rope_scaling {
    double factor;            /* >= 1 */
    double low_freq_factor;   /* > 0 */
    double high_freq_factor;  /* > low_freq_factor */
    int64_t original_max_position_embeddings; /* > 0 */
} nb_rope_scaling;

/* nb_rope's tables for positions 0 .. n_pos - 1: *cos and *sin, new
 * (n_pos, head_dim) tensors of dtype in ctx (keep them in a context that
 * lives as long as the model), with
 *
 *   f_i = theta^(-2i / head_dim)  (i < head_dim / 2; scaled by `scaling`
 *                                  when it is not NULL)
 *   cos[p, i] = cos[p, i + head_dim/2] = cos(p f_i), and sin likewise
 *
 * computed in float64 and rounded once to dtype (Hugging Face and the
 * course compute the angles in float32, off by about p * 1e-7 radians at
 * position p). NB_OK, or the error (also on ctx, naming rope_tables):
 * NULL cos or sin, an odd or non-positive head_dim, n_pos < 0, theta not
 * finite and >= 1, a scaling out of its ranges, dtype not f32 or f64;
 * NB_ERR_SIZE for tables too large to hold. */
nb_status nb_rope_tables(nb_ctx *ctx, int64_t head_dim, int64_t n_pos, double theta,
                         const nb_rope_scaling *scaling, nb_dtype dtype, nb_tensor **cos,
                         nb_tensor **sin);

#ifdef __cplusplus
}
#endif
#endif
