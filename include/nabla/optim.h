/* nabla/optim.h - SGD, Adam and AdamW with PyTorch's update rules, Muon,
 * and gradient clipping.
 *
 *   nb_ctx *pctx = nb_ctx_new(0);                // parameters; outlives opt
 *   nb_tensor_list params = {0};                 // leaves made with nb_requires_grad
 *   nb_list_add(&params, "W", W);
 *   nb_list_add(&params, "b", b);
 *   nb_optim *opt = nb_adamw_new(pctx, &params, nb_adamw_defaults(1e-3));
 *   if (!opt) { fprintf(stderr, "%s\n", nb_ctx_error(pctx)); ... }
 *   for (...) {
 *       nb_optim_zero_grad(opt);
 *       ... forward, nb_backward(step, loss, NULL) ...
 *       nb_clip_grad_norm(&params, 1.0);
 *       if (nb_optim_step(opt)) { fprintf(stderr, "%s\n", nb_ctx_error(pctx)); ... }
 *   }
 *   nb_optim_free(opt);
 *
 * The updates are those of PyTorch's single-tensor (foreach=False) CPU
 * implementation, with the same order of floating-point operations. They run
 * in the parameter's dtype T (f32 or f64); every scalar coefficient is
 * computed in double, as Python does, then rounded to T, as PyTorch's
 * kernels do. For a parameter p (any shape) with gradient g, elementwise:
 *
 * SGD (torch.optim.SGD):
 *     d = maximize ? -g : g
 *     if weight_decay != 0:  d = d + weight_decay * p
 *     if momentum != 0:
 *         first step of p:   buf = d                        (no dampening)
 *         later steps:       buf = buf * momentum + (1 - dampening) * d
 *         d = nesterov ? d + momentum * buf : buf
 *     p = p + (-lr) * d
 *
 * Adam (torch.optim.Adam); state m, v (and v_max with amsgrad) start at zero
 * and t (this parameter's step count) at 0 on the parameter's first step:
 *     t = t + 1
 *     d = maximize ? -g : g
 *     if weight_decay != 0:  d = d + weight_decay * p
 *     m = m * beta1 + (1 - beta1) * d
 *     v = v * beta2 + ((1 - beta2) * d) * d
 *     bias_correction1 = 1 - beta1^t                         (double)
 *     bias_correction2 = 1 - beta2^t                         (double)
 *     step_size = lr / bias_correction1                      (double)
 *     if amsgrad:  v_max = max(v_max, v);  denom = sqrt(v_max) / sqrt(bias_correction2) + eps
 *     else:                                denom = sqrt(v)     / sqrt(bias_correction2) + eps
 *     p = p + ((-step_size) * m) / denom
 *
 * AdamW (torch.optim.AdamW): decoupled weight decay, applied first, then
 * Adam's update without the weight_decay term on d:
 *     p = p * (1 - lr * weight_decay)
 *
 * Muon (Keller Jordan's muon.py, see nb_muon_new below) for a parameter
 * viewed as a matrix of R = shape[0] rows and C = numel / R columns; state
 * buf (the momentum buffer) starts at zero:
 *     buf = buf * momentum + (1 - momentum) * g
 *     u   = nesterov ? g + momentum * (buf - g) : buf
 *     X   = u, transposed when R > C (so X is wide: m = min(R, C) rows)
 *     X   = X / (||X||_F + 1e-7)
 *     ns_steps times:  A = X Xt;  B = b A + c (A A);  X = a X + B X
 *                      (a, b, c) = (3.4445, -4.7750, 2.0315)
 *                      (when X is not square, computed on the Gram matrix:
 *                      X_k = Q_k X_0, Q_k a polynomial in X_0 X_0t, in
 *                      runs of up to 3 steps: the same but for rounding)
 *     u   = X (transposed back) * max(1, R / C)^0.5
 *     p   = p * (1 - lr * weight_decay)
 *     p   = p + (-lr) * u
 * in the parameter's dtype, the products on nabla's gemm and threads.
 *
 * Agreement with PyTorch: PyTorch's AVX2 kernels fuse some multiply-adds
 * (`a + alpha * b`) into one rounding; nabla keeps separate roundings so its
 * results do not depend on the CPU. The float64 trajectories therefore agree
 * to a few ulps (about 1e-15 relative), not always bit for bit.
 *
 * Parameters whose grad pointer is NULL at a step are skipped, as PyTorch
 * skips parameters whose .grad is None: no update, no state change, and
 * their Adam step count t does not advance. State is created lazily, on a
 * parameter's first step with a gradient, exactly as PyTorch does.
 *
 * Errors: one channel, the sticky error of a context. The constructors take
 * a context first, as every function taking one does; they return NULL and
 * record the reason there (a NULL context, or one that already holds an
 * error, gives NULL and records nothing). The optimizer keeps a pointer to
 * that context and records on it every later error of the calls that have
 * no context argument: nb_optim_step, nb_optim_set_lr refusing an lr,
 * nb_optim_load_state. The context must therefore outlive the optimizer
 * (the parameters' context is the usual choice). The optimizer does not
 * look at errors already on it: they belong to whatever recorded them, and
 * the first error is the one kept. No function crashes on bad input. */
#ifndef NABLA_OPTIM_H
#define NABLA_OPTIM_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* SGD options (PyTorch's names and defaults). */
typedef struct nb_sgd_opts {
    double lr;           /* >= 0 */
    double momentum;     /* >= 0; 0 disables the momentum buffer */
    double dampening;    /* applied from the second step of each parameter */
    double weight_decay; /* >= 0; L2 penalty added to the gradient */
    bool nesterov;       /* needs momentum > 0 and dampening == 0 */
    bool maximize;       /* ascend instead of descend */
} nb_sgd_opts;

/* Adam / AdamW options. */
typedef struct nb_adam_opts {
    double lr;           /* >= 0 */
    double beta1, beta2; /* each in [0, 1) */
    double eps;          /* >= 0 */
    double weight_decay; /* >= 0; L2 for Adam, decoupled for AdamW */
    bool amsgrad;        /* normalise by the running max of v */
    bool maximize;
} nb_adam_opts;

/* Muon options (the defaults of muon.py). */
typedef struct nb_muon_opts {
    double lr;           /* > 0 */
    double momentum;     /* in [0, 1) */
    bool nesterov;       /* update from lerp(g, buf, momentum) instead of buf */
    int ns_steps;        /* Newton-Schulz iterations, 1 to 1000 */
    double weight_decay; /* >= 0; decoupled: p *= 1 - lr * weight_decay */
} nb_muon_opts;

/* {lr 0.02, momentum 0.95, nesterov true, ns_steps 5, weight_decay 0} */
nb_muon_opts nb_muon_defaults(void);

/* {lr, momentum 0, dampening 0, weight_decay 0, nesterov false, maximize false} */
nb_sgd_opts nb_sgd_defaults(double lr);
/* {lr, betas (0.9, 0.999), eps 1e-8, weight_decay 0, amsgrad false, maximize false} */
nb_adam_opts nb_adam_defaults(double lr);
/* Same as nb_adam_defaults but weight_decay 0.01 (PyTorch's AdamW default). */
nb_adam_opts nb_adamw_defaults(double lr);

typedef struct nb_optim nb_optim;

/* New optimizers over `params`. The list is copied (the names and tensors are
 * not: they must outlive the optimizer). Every parameter must be a non-NULL
 * floating leaf with a grad buffer (nb_requires_grad), listed once, under a
 * unique name of at most 400 characters (a NULL name is allowed; its state
 * is then named by its index in the list). Options are checked as PyTorch
 * checks them. On any problem, or when memory runs out, the constructor
 * returns NULL and records the reason on ctx, e.g.
 *     "adam: beta1 = 1 is outside [0, 1)"
 *     "sgd: parameter 1 ('b') has no grad buffer; call nb_requires_grad on it first"
 * A NULL ctx, or one that already holds an error, gives NULL. ctx is kept
 * (not owned): the optimizer's later errors are recorded on it, so it must
 * outlive the optimizer. The optimizer keeps its state in a private
 * context, freed by nb_optim_free. */
nb_optim *nb_sgd_new(nb_ctx *ctx, const nb_tensor_list *params, nb_sgd_opts o);
nb_optim *nb_adam_new(nb_ctx *ctx, const nb_tensor_list *params, nb_adam_opts o);
nb_optim *nb_adamw_new(nb_ctx *ctx, const nb_tensor_list *params, nb_adam_opts o);

/* Muon over `params` (the same rules for the list as above), each of at
 * least 2 dims: one with more is viewed as (shape[0], the rest). Refused,
 * naming the option or parameter: lr <= 0, momentum outside [0, 1),
 * ns_steps outside 1..1000, weight_decay < 0 or NaN, a parameter of fewer than 2 dims
 *     "muon: parameter 2 ('b') has 1 dim; Muon needs matrices (give it to AdamW)"
 * State per parameter: "state.<name>.momentum_buffer". */
nb_optim *nb_muon_new(nb_ctx *ctx, const nb_tensor_list *params, nb_muon_opts opts);

/* Muon with an auxiliary AdamW, as muon.py's MuonWithAuxAdam groups a model:
 * parameter i goes to Muon when use_muon[i] (it then needs 2 or more dims),
 * to AdamW (nb_adamw_new's update with `adam`) otherwise. One optimizer, so
 * one checkpoint and one step: its state is Muon's momentum_buffer for the
 * Muon parameters and AdamW's step, exp_avg, exp_avg_sq for the others. Its
 * learning rate (nb_optim_set_lr, get_lr) is the AdamW group's; setting it
 * sets Muon's to lr * muon.lr / adam.lr, so a schedule scales both groups
 * together (adam.lr must therefore be > 0). Kind "muon". */
nb_optim *nb_muon_adamw_new(nb_ctx *ctx, const nb_tensor_list *params, const bool *use_muon,
                            nb_muon_opts muon, nb_adam_opts adam);

/* Frees the optimizer and its state (not the parameters). NULL is a no-op. */
void nb_optim_free(nb_optim *o);

/* One update of every parameter whose grad is non-NULL, by the formulas
 * above. NB_ERR_NULL for a NULL optimizer (nothing recorded: there is no
 * context to record on), NB_ERR_MEMORY when lazily created state cannot be
 * allocated (then no parameter has changed; the message is recorded on the
 * optimizer's context). */
nb_status nb_optim_step(nb_optim *o);

/* Sets every parameter's gradient to zero (PyTorch's zero_grad with
 * set_to_none=False); NULL grads stay NULL. NULL is a no-op. */
void nb_optim_zero_grad(nb_optim *o);

/* The learning rate used by the next steps (schedulers set it each step).
 * A negative or NaN lr is refused: lr stays, and the optimizer's context
 * records why ("adam: set_lr: invalid learning rate nan, expected >= 0").
 * get_lr gives NaN for NULL. */
void nb_optim_set_lr(nb_optim *o, double lr);
double nb_optim_get_lr(const nb_optim *o);

/* PyTorch's parameter groups with their own lr: parameter i (of the list
 * the optimizer was made with) steps at scale * the lr of its update (for
 * nb_muon_adamw_new, its group's: Muon's or AdamW's), so a schedule setting
 * nb_optim_set_lr moves every rate together. Weight decay follows the
 * scaled lr, as in a PyTorch group. Every scale is 1 until set; a scale is
 * configuration, not state: checkpoints do not hold it, and a resumed run
 * sets it again. NB_ERR_VALUE (recorded on the optimizer's context) for i
 * out of range or a scale that is negative, NaN or infinite.
 * nb_optim_lr_scale_of gives parameter i's scale (NaN for NULL or i out of
 * range). */
nb_status nb_optim_set_lr_scale(nb_optim *o, int i, double scale);
double nb_optim_lr_scale_of(const nb_optim *o, int i);

/* Number of nb_optim_step calls so far (restored by nb_optim_load_state);
 * 0 for NULL. */
int64_t nb_optim_step_count(const nb_optim *o);

/* ------------------------------------------------------------------------
 * Checkpoints. The state is a list of named tensors in the parameter's dtype
 * and shape, named after PyTorch's optimizer.state_dict():
 *     "state.<param name>.momentum_buffer"   SGD with momentum != 0, Muon
 *     "state.<param name>.step"              Adam/AdamW: f64 scalar, this parameter's t
 *     "state.<param name>.exp_avg"           Adam/AdamW: m
 *     "state.<param name>.exp_avg_sq"        Adam/AdamW: v
 *     "state.<param name>.max_exp_avg_sq"    Adam/AdamW with amsgrad: v_max
 *     "state.step"                           f64 scalar, nb_optim_step_count
 * A parameter has entries only once it has taken a step (lazy state). Saving,
 * loading into a new optimizer with the same options and parameters, and
 * stepping on gives bit-identical parameters to never having stopped. */

/* Appends copies of the state tensors, and their names, allocated in ctx, to
 * `out`. Nothing is appended on failure: NB_ERR_NULL for NULL arguments,
 * NB_ERR_SIZE when `out` lacks room, NB_ERR_VALUE when a name is already in
 * `out`, the status of ctx if it already holds an error, NB_ERR_MEMORY. The
 * error is recorded on ctx (not on the optimizer's own context). */
nb_status nb_optim_state(nb_ctx *ctx, nb_optim *o, nb_tensor_list *out);

/* Replaces the state by the one in `state` (copied; entries not starting
 * with "state." are ignored, so a whole checkpoint can be passed). Every
 * tensor must have its parameter's shape and dtype, steps must be f64
 * one-element tensors holding whole numbers >= 0, the entries of a
 * parameter must be complete, and every "state." entry must belong to this
 * optimizer. On failure nothing changes and the message, recorded on the
 * optimizer's context, names the entry: NB_ERR_NULL, NB_ERR_SHAPE,
 * NB_ERR_DTYPE, NB_ERR_VALUE, NB_ERR_MEMORY (NB_ERR_NULL alone for a NULL
 * optimizer). */
nb_status nb_optim_load_state(nb_optim *o, const nb_tensor_list *state);

/* ------------------------------------------------------------------------
 * What an optimizer is (for checkpoints and tools; see nb_save_checkpoint). */

/* "sgd", "adam", "adamw" or "muon" (static strings); NULL for NULL. */
const char *nb_optim_kind(const nb_optim *o);

/* The options o runs with, lr as last set by nb_optim_set_lr. Each returns
 * true and fills *out when o is of its family (SGD, or Adam/AdamW);
 * otherwise, or for NULL arguments, returns false and leaves *out alone. */
bool nb_optim_sgd_options(const nb_optim *o, nb_sgd_opts *out);
bool nb_optim_adam_options(const nb_optim *o, nb_adam_opts *out);
/* Muon's options (lr as last scaled by nb_optim_set_lr); for a
 * nb_muon_adamw_new optimizer nb_optim_adam_options gives its AdamW group's. */
bool nb_optim_muon_options(const nb_optim *o, nb_muon_opts *out);

/* ------------------------------------------------------------------------
 * Gradient clipping (torch.nn.utils), over the parameters whose grad is
 * non-NULL.
 *
 * nb_clip_grad_norm: total = sqrt(sum of g^2 over all gradients), summed in
 * double (four partial sums in a fixed order). When coef = max_norm / (total + 1e-6) is below 1, every gradient is
 * multiplied by coef (rounded to its dtype). Returns total (before
 * clipping); 0 when no parameter has a gradient, NaN for a NULL list. */
double nb_clip_grad_norm(const nb_tensor_list *params, double max_norm);

/* Clamps every gradient element to [-clip, clip] (NaN stays NaN). A NULL list
 * or a negative or NaN clip does nothing. */
void nb_clip_grad_value(const nb_tensor_list *params, double clip);

/* ------------------------------------------------------------------------
 * Parameter groups: AdamW whose weight decay applies to some parameters
 * only. nanoGPT's configure_optimizers decays the parameters with 2 or more
 * dims (matmul weights, embeddings) and not the 1-D ones (biases, LayerNorm
 * weights): decay_1d false. The course's AdamW(model.parameters(),
 * weight_decay=0.1) decays every parameter: decay_1d true (the same as
 * nb_adamw_new). The group a parameter is in only changes its weight_decay;
 * state, checkpoints and names are those of nb_adamw_new. */
nb_optim *nb_adamw_new_groups(nb_ctx *ctx, const nb_tensor_list *params, nb_adam_opts o,
                              bool decay_1d);

/* ------------------------------------------------------------------------
 * Learning-rate schedules. */
typedef struct nb_lr_schedule {
    double learning_rate;  /* peak (and constant) lr */
    bool decay_lr;         /* false: constant learning_rate */
    int64_t warmup_iters;  /* >= 0 */
    int64_t lr_decay_iters;
    double min_lr;
} nb_lr_schedule;

/* nanoGPT's get_lr(it), exactly (in double):
 *   !decay_lr:              learning_rate
 *   it < warmup_iters:      learning_rate * (it + 1) / (warmup_iters + 1)
 *   it > lr_decay_iters:    min_lr
 *   otherwise:              r = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
 *                           min_lr + 0.5 * (1 + cos(pi * r)) * (learning_rate - min_lr)
 * (lr_decay_iters == warmup_iters gives min_lr from warmup_iters on.) NaN
 * for NULL or it < 0 (nb_optim_set_lr then refuses it). */
double nb_lr_at(const nb_lr_schedule *s, int64_t it);

/* The same schedule with the decay's progress given rather than counted:
 * warmup by iterations as above, then the cosine at r = frac (frac <= 0:
 * learning_rate; frac >= 1: min_lr); lr_decay_iters is not used. For a run
 * on the clock, frac = the time since the warmup over the time the decay
 * has (nabla-gpt's --max_time). NaN for NULL, it < 0 or a NaN frac. */
double nb_lr_at_fraction(const nb_lr_schedule *s, int64_t it, double frac);

/* ------------------------------------------------------------------------
 * One training step, shared by every driver (nabla-gpt, the parity tests, an
 * MPI driver):
 *   zero every gradient of params (deferred: each is marked grad_stale, and
 *       the first backward rule to reach it stores rather than adds; one no
 *       rule reaches is cleared after the last backward, so loss_fn must
 *       not read the parameters' gradients);
 *   for micro = 0 .. accum_steps-1:
 *       nb_ctx_reset(ctx); loss = loss_fn(ctx, micro, user)  (a 0-dim loss on ctx)
 *       backward of loss * (1 / accum_steps)                 (nanoGPT's loss / k)
 *   grad_sync(params, sync_user) if set: called once, after accumulation and
 *       before clipping, so a data-parallel driver can allreduce (average)
 *       the gradients there; a nonzero status stops the step (no update);
 *   if grad_clip > 0: nb_clip_grad_norm(params, grad_clip);
 *   nb_optim_set_lr(opt, lr); nb_optim_step(opt).
 * The loss reported is the mean of the k micro-batch losses (each taken
 * before scaling), summed in double. The step context is left holding the
 * last micro-batch's tape; the gradients of its intermediate tensors are
 * not kept (their buffers are reused on the way back, which keeps the
 * step's memory near one layer of gradients): only the parameters' (and
 * other leaves') gradients are read after a step. */
typedef nb_tensor *(*nb_loss_fn)(nb_ctx *ctx, int micro, void *user);
typedef nb_status (*nb_grad_sync_fn)(const nb_tensor_list *params, void *user);

typedef struct nb_train_step {
    nb_optim *opt;
    const nb_tensor_list *params; /* the optimizer's parameters */
    int accum_steps;              /* >= 1 (gradient_accumulation_steps) */
    double grad_clip;             /* <= 0: no clipping */
    double lr;                    /* this step's learning rate (nb_lr_at) */
    nb_loss_fn loss_fn;
    void *user;
    nb_grad_sync_fn grad_sync;    /* may be NULL */
    void *sync_user;
} nb_train_step;

typedef struct nb_step_result {
    double loss;      /* mean micro-batch loss */
    double grad_norm; /* global norm before clipping (computed even without clipping) */
} nb_step_result;

/* Runs one step on ctx (reset per micro-batch). NB_OK; otherwise the status,
 * with the message on ctx (a failed loss_fn keeps its own error there; a
 * failed optimizer step records its message here, not on the optimizer's
 * context), and no parameter changed when the failure came before the
 * optimizer step. `out` may be NULL. */
nb_status nb_train_step_run(nb_ctx *ctx, const nb_train_step *s, nb_step_result *out);

#ifdef __cplusplus
}
#endif
#endif
