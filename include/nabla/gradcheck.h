/* nabla/gradcheck.h - float64 finite-difference gradient checks with
 * PyTorch's semantics (torch.autograd.gradcheck) that name the op whose
 * backward is wrong.
 *
 * Blame. In a function of 40 ops the worst element of d out / d input does
 * not say which op's backward rule is wrong. So when a check fails (or
 * opts.blame asks), every node of the tape is judged by its own rule. Along
 * one direction (an input tangent u, an output cotangent v), f runs three
 * more times with the tape recording:
 *   - at x + eps*u and x - eps*u, reading each node's inputs and output the
 *     moment it is recorded: central differences give each value's tangent
 *     t, and a node's output tangent is its Jacobian times its input ones;
 *   - at x, then backward from v, keeping each node's output gradient g and
 *     what its rule adds to each input's gradient, d_i.
 * A node's rule agrees when sum_i <d_i, t_i> = <g, t_out> (the identity
 * <J^T g, t> = <g, J t>) within atol + rtol * |<g, t_out>|. Each node is
 * judged on its own, whatever the others do, so an op whose output is used
 * twice, or whose input is shared with other ops, is still told apart. The
 * first direction replays the failure (the worst element's input and
 * output, or fast mode's worst (u, v)), so the nodes' differences add up to
 * the error the check saw. If no node disagrees there, a random direction
 * follows in which each node's output is also moved by eps * N(0, 1) when
 * it is recorded (later ops read the moved value), giving every rule a
 * direction of its own. The latest disagreeing node is named, with its tape
 * index and creation site (set with NB_HERE(ctx) inside f); its wrong input
 * is found by moving one input at a time, latest-made first. Views
 * (reshape) share their input's data and are never moved. An input that
 * changes with x but is off the tape (made with grad disabled, or by a
 * custom op that was not recorded) is reported as such. Blame needs ops to
 * record their output after computing it (nabla's ops and nb_record do) and
 * f to record the same tape on every call. */
#ifndef NABLA_GRADCHECK_H
#define NABLA_GRADCHECK_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The function under test: builds its output from `in` on `ctx` with nabla
 * ops. Called many times, on fresh F64 copies of the inputs. Must be
 * deterministic (re-seed any rng inside from `user`).
 *
 * Custom ops (nb_record) must implement float64: every check runs f in
 * float64 whatever the inputs' dtype, as PyTorch's gradcheck wants double
 * inputs. An op whose output dtype differs from its float inputs' is
 * stopped by nb_record with an error naming the op and the missing dtype. */
typedef nb_tensor *(*nb_gradcheck_fn)(nb_ctx *ctx, nb_tensor *const *in, void *user);

/* Forward mode's JVP of f at inputs along tangents, in one forward pass
 * (functorch's jvp): f runs once on duals of the inputs (nb_make_dual), and
 * *out = f(inputs), *out_tangent = J tangents (zeros when no input reaches
 * the output). tangents[j] must have inputs[j]'s shape and dtype; a NULL
 * entry is a zero tangent. Tensors of ctx; the tangent is recorded when
 * grad is on and an input requires grad (differentiable again). Errors as
 * nb_make_dual's, "jvp_fwd" named for NULL arguments or f returning NULL. */
nb_status nb_jvp_fwd(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                     nb_tensor *const *inputs, nb_tensor *const *tangents, nb_tensor **out,
                     nb_tensor **out_tangent);

typedef struct nb_gradcheck_opts {
    double eps;  /* finite-difference step (PyTorch: 1e-6) */
    double atol; /* absolute tolerance (1e-5) */
    double rtol; /* relative tolerance (1e-3) */
    bool fast;   /* check v^T J u along random u, v instead of the full J */
    int n_dirs;  /* fast mode: how many (u, v) pairs (default 4) */
    uint64_t seed; /* directions (fast mode, blame) come from PCG32 with this seed */
    bool blame;    /* look for a wrong backward even when the check passes */
    /* also check forward mode (PyTorch's check_forward_ad): the JVP J u of
     * a dual forward (each input carrying a tangent u: every basis vector,
     * or fast mode's directions) against the central difference of f along
     * u; a failure names the op whose forward-mode rule disagrees.
     * nb_gradgradcheck passes it on to its check of the gradient, which
     * then checks forward-over-reverse too */
    bool check_forward_ad;
} nb_gradcheck_opts;

/* PyTorch's defaults: eps 1e-6, atol 1e-5, rtol 1e-3, full Jacobian; blame
 * on failure only. */
nb_gradcheck_opts nb_gradcheck_defaults(void);

typedef struct nb_gradcheck_result {
    bool passed;
    double max_abs_err;  /* worst |analytic - numeric| over all checked entries */
    int worst_input;     /* which input holds the worst entry, 0-based (-1 if
                          * none); listed parameters follow the inputs */
    size_t worst_index;  /* flat index into that input (fast mode: direction) */
    size_t worst_output; /* flat index into the output (full mode) */
    double analytic;     /* the worst entry's analytic value ... */
    double numeric;      /* ... and its finite-difference value */
    char message[512];   /* a sentence naming the op, the entry and both values */
    /* Blame (see the top of this file): the op whose backward disagrees
     * with finite differences; blame_index is -1 when none was found (the
     * check passed, or every recorded op agrees). */
    int blame_index;        /* its position on the tape (nb_tape_print's #) */
    char blame_op[64];      /* its name ("matmul", or a custom op's); "" if none */
    const char *blame_file; /* where it was created (NB_HERE), NULL if not set */
    int blame_line;
    int blame_input;        /* which of its inputs (0-based) gets a wrong
                             * gradient; -1 when it could not be isolated */
    bool blame_untracked;   /* that input changes with the checked inputs but
                             * is not on the tape: it was made by an op that was
                             * not recorded, rather than a wrong backward */
    int blame_count;        /* how many ops disagree (the latest is named) */
    double blame_analytic;  /* along the direction that blamed it: sum_i
                             * <d_i, t_i> by its rule ... */
    double blame_numeric;   /* ... and <g, t_out> by differences (see above) */
    /* check_forward_ad: `passed` is backward_passed && forward_passed */
    bool backward_passed;       /* the reverse-mode check passed */
    bool forward_passed;        /* every forward-mode JVP agreed (true when not asked) */
    double forward_max_abs_err; /* worst |JVP - numeric| over its entries */
    int forward_blame_index;    /* the first op, in f's order (nb_tape_print's #), whose
                                 * output's tangent disagrees with the difference of that
                                 * output along u: its forward-mode rule is wrong; -1 none */
    char forward_blame_op[64];  /* its name; "" if none */
} nb_gradcheck_result;

/* Checks d f(in) / d in[i] for every input that requires grad: analytic
 * (from nb_backward) against central differences (f(x+eps) - f(x-eps))/2eps,
 * element by element; passes when every |a - n| <= atol + rtol * |n|.
 * Inputs may be F32 or F64: the check itself runs in F64, on private
 * contexts. opts may be NULL (defaults). res may be NULL. Returns NB_OK
 * when it passed, NB_ERR_VALUE when it did not (or when opts are invalid:
 * eps not finite and > 0, atol or rtol negative or NaN; nothing runs), another
 * status when f failed. Any status but NB_OK comes with its message (the one in
 * res->message) recorded on ctx, like every error; a NULL ctx, or one that
 * already holds an error, runs nothing and returns NB_ERR_NULL or that
 * error's status. On failure the message names the blamed op, its tape
 * index, creation site and input, then the worst element. Inputs are
 * numbered from 0, as in PyTorch ("d out[1] / d input 0 [3]", "for its
 * input 0"). `passed` and the status depend only on the check itself, not
 * on blame. */
nb_status nb_gradcheck(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                       nb_tensor *const *in, const nb_gradcheck_opts *opts,
                       nb_gradcheck_result *res);

/* gradcheck(layer, params + inputs): checks f with respect to the tensors
 * of a parameter list (a module's `params`, or any nb_tensor_list) as well
 * as its inputs, without touching the module. f reads the parameters where
 * the module keeps them, e.g.
 *
 *     static nb_tensor *f(nb_ctx *c, nb_tensor *const *in, void *layer) {
 *         return nb_nn_linear_forward(c, layer, in[0]);
 *     }
 *     nb_gradcheck_params(ctx, f, &layer, &layer.params, 1, &x, NULL, &r);
 *
 * While the check runs, each listed tensor holds a float64 copy of its
 * values (its struct is rebound in place: the same pointer, dtype F64), so
 * nothing else may use the module meanwhile; afterwards its dtype, data,
 * grad and requires_grad are exactly as before, whatever the outcome. f's
 * `in` holds the n_in input copies followed by the parameters, in list
 * order, and messages number them the same way, 0-based ("d input 1
 * (parameter 'weight')"). Which tensors are checked follows nb_gradcheck's
 * rule over all of them: those marked requires_grad (module parameters
 * are), so mark an input with nb_requires_grad to check it too. params may
 * be NULL (then this is nb_gradcheck). ctx records the outcome as for
 * nb_gradcheck. */
nb_status nb_gradcheck_params(nb_ctx *ctx, nb_gradcheck_fn f, void *user,
                              const nb_tensor_list *params, int n_in, nb_tensor *const *in,
                              const nb_gradcheck_opts *opts, nb_gradcheck_result *res);

/* PyTorch's gradgradcheck: checks the gradients of the gradients of f.
 * With random grad_outputs v (uniform in [-1, 1), PCG32 seeded by
 * opts->seed), G(x, v) = nb_grad(f(x), x, v, create_graph) is checked with
 * nb_gradcheck against x and v, with the same options (float64, eps 1e-6,
 * atol 1e-5, rtol 1e-3 by default; fast mode as there) and result. Before
 * that, every op of f's tape runs its recorded backward beside its ordinary
 * one on a random output gradient: an op whose two disagree fails the check
 * and is named in the blame fields and the message ("the graph backward of
 * op #3 'cube' ... its second-order rule is wrong"), with NB_ERR_VALUE; a
 * custom op that declared no graph backward (nb_node_set_graph_backward)
 * is named too, with NB_ERR_STATE, as nb_grad's create_graph gives. */
nb_status nb_gradgradcheck(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                           nb_tensor *const *in, const nb_gradcheck_opts *opts,
                           nb_gradcheck_result *res);
/* The same with a parameter list, as nb_gradcheck_params. */
nb_status nb_gradgradcheck_params(nb_ctx *ctx, nb_gradcheck_fn f, void *user,
                                  const nb_tensor_list *params, int n_in, nb_tensor *const *in,
                                  const nb_gradcheck_opts *opts, nb_gradcheck_result *res);

/* ------------------------------------------------------------------------
 * Transforms: functorch's jacrev/jacfwd, hessian and vmap(grad), over the
 * same f every check takes. f runs on ctx itself (not on copies), so the
 * results can take part in later gradients: an input that requires grad is
 * used as it is, any other is replaced by a copy (a leaf of ctx that
 * requires grad). Results are new tensors of ctx in each input's dtype.
 * Gradient recording is switched on while f runs and then put back.
 * Errors, recorded on ctx with the function's name: NULL ctx (nothing
 * recorded), f, inputs, an entry of them or the results (NB_ERR_NULL),
 * n_in < 1 (NB_ERR_VALUE), an integer or bool input (NB_ERR_DTYPE), f
 * failing (its own error) or returning NULL (NB_ERR_NULL), results of more
 * than NB_MAX_DIMS dims (NB_ERR_SIZE). Results are NULL on error. */
typedef enum nb_jac_mode { NB_JAC_AUTO, NB_JAC_REV, NB_JAC_FWD } nb_jac_mode;
typedef struct nb_jacobian_opts {
    nb_jac_mode mode;  /* AUTO: FWD when the inputs have fewer elements than f's output */
    bool create_graph; /* record the Jacobian, so it can be differentiated again */
} nb_jacobian_opts;

/* jac[j] = d f(inputs) / d inputs[j], shape f's shape ++ inputs[j]'s shape
 * (jac[j][i..., k...] = d out[i...] / d in_j[k...]), as functorch's
 * jacrev / jacfwd with argnums all inputs. f is run once. REV: one
 * backward per output element, all over that one tape (retain_graph).
 * FWD: one Jacobian-vector product per input element (see the cost table
 * in docs/gradcheck.md). opts NULL: AUTO, no graph. */
nb_status nb_jacobian(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                      nb_tensor *const *inputs, const nb_jacobian_opts *opts, nb_tensor **jac);

/* The Hessian of a scalar f (one element, else NB_ERR_SHAPE):
 * hess[i * n_in + j] = d^2 f / d in_i d in_j, shape in_i's ++ in_j's
 * (functorch.hessian with argnums all inputs); n_in * n_in results.
 * Reverse over reverse: one backward with create_graph, then one
 * backward of it per input element, on one tape. */
nb_status nb_hessian(nb_ctx *ctx, nb_gradcheck_fn f, void *user, int n_in,
                     nb_tensor *const *inputs, nb_tensor **hess);

/* Per-sample gradients, functorch's vmap(grad(loss), in_dims=(None, 0)):
 * loss(ctx, in, user) gets params[0..n_params) followed by one sample of
 * each data tensor (data[k] with its dim 0 removed, a copy) and returns a
 * scalar; grads[j] (shape (B, params[j]'s shape), params[j]'s dtype) holds
 * d loss(sample b) / d params[j] in row b. Every data tensor must have the
 * same dim 0, B (else NB_ERR_SHAPE) and at least one dim; n_params and
 * n_data must be >= 1 (NB_ERR_VALUE). params are read, never changed,
 * and their .grad is not touched as long as the loss reads them from `in`
 * (a tensor it reaches otherwise, such as a module's own parameter, gets
 * the batch's summed gradient, as from nb_backward). Each sample's loss is
 * recorded on ctx and one backward runs over them all; which ops are
 * batched and which run per sample is in docs/gradcheck.md. Other errors
 * as for nb_jacobian; a loss that is not a scalar is NB_ERR_SHAPE. */
nb_status nb_per_sample_grads(nb_ctx *ctx, nb_gradcheck_fn loss, void *user, int n_params,
                              nb_tensor *const *params, int n_data, nb_tensor *const *data,
                              nb_tensor **grads);

#ifdef __cplusplus
}
#endif
#endif
