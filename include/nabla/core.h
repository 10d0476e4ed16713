/* nabla/core.h - contexts, tensors, the tape and the error model.
 *
 * Included by <nabla.h>; see the tutorial there. */
#ifndef NABLA_CORE_H
#define NABLA_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#ifdef __cplusplus
#include <atomic>
#include <initializer_list>
typedef std::atomic<int> nb_atomic_int; /* layout-compatible with C11's _Atomic int */
#else
typedef _Atomic int nb_atomic_int;
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define NB_VERSION_MAJOR 0
#define NB_VERSION_MINOR 2
#define NB_VERSION_PATCH 0
#define NB_VERSION "0.2.0"

#define NB_MAX_DIMS 8 /* tensors have 0..8 dimensions */

/* NB_PRINTF_LIKE(fmt, args) after a declaration: the function formats like
 * printf, its format string is parameter `fmt` and the values start at
 * parameter `args` (1-based), so gcc and clang check each call's format
 * against its arguments (-Wformat). Nothing on other compilers. The one
 * spelling of this attribute for the library, its tools and yours. */
#if defined(__GNUC__)
#define NB_PRINTF_LIKE(fmt, args) __attribute__((format(printf, fmt, args)))
#else
#define NB_PRINTF_LIKE(fmt, args)
#endif

/* Element types. Floating tensors (F32, F64) take part in autograd; I64 holds
 * class indices and token ids (PyTorch's long); BOOL holds masks (one byte,
 * 0 or 1). */
typedef enum nb_dtype { NB_F32, NB_F64, NB_I64, NB_BOOL, NB_DTYPE_COUNT } nb_dtype;

/* Status codes. NB_OK is 0 so `if (status)` reads as "if it failed". */
typedef enum nb_status {
    NB_OK = 0,
    NB_ERR_NULL,   /* a NULL context, tensor or pointer where one is required */
    NB_ERR_SHAPE,  /* shapes do not fit the op's rules */
    NB_ERR_DTYPE,  /* wrong or mixed element types */
    NB_ERR_SIZE,   /* negative dims, too many dims, overflowing element counts */
    NB_ERR_VALUE,  /* an argument out of range (dim, p, index, NaN where not allowed) */
    NB_ERR_MEMORY, /* an allocation failed */
    NB_ERR_STATE,  /* the call does not fit the current state (e.g. a tensor recorded twice) */
    NB_ERR_IO,     /* a file could not be read or written */
    NB_ERR_FORMAT, /* a file is corrupt, truncated or not what it claims */
    NB_STATUS_COUNT
} nb_status;

/* A short, static name of a status ("shape error", ...). Never NULL. */
const char *nb_status_str(nb_status s);

/* Bytes per element of a dtype (4, 8, 8, 1), and its name ("f32", ...). */
size_t nb_dtype_size(nb_dtype dt);
const char *nb_dtype_name(nb_dtype dt);

/* ------------------------------------------------------------------------
 * Contexts.
 *
 * A context is an arena plus a tape. Every tensor belongs to exactly one
 * context and lives until that context is reset or freed: there is no
 * per-tensor free. A training loop typically has two:
 *   - a long-lived context holding parameters (and their gradients), and
 *   - a step context that records the forward pass and is reset each step.
 * After the first step the step context has all the memory it needs, so a
 * steady-state loop calls malloc zero times per op (see nb_ctx_mallocs).
 *
 * Errors are sticky (cairo style): the first failure on a context is kept
 * with a message naming the op, the shapes and what was expected; every later
 * op on that context returns NULL without doing anything. Check once, at the
 * end, with nb_ctx_error(). This is the library's only error channel: every
 * function that takes a context takes it first and records its failures
 * there (an nb_status or NULL is returned too, for convenience); a function
 * without a context argument records on the context of the object it works
 * on, as its header comment says. A NULL context records nothing: the call
 * returns NB_ERR_NULL or NULL. */
typedef struct nb_ctx nb_ctx;

/* A new context. `reserve` bytes are allocated up front (0 picks a default;
 * the arena grows as needed). Returns NULL only when memory is exhausted. */
nb_ctx *nb_ctx_new(size_t reserve);

/* Frees the context and every tensor in it. NULL is a no-op. */
void nb_ctx_free(nb_ctx *ctx);

/* Forgets every tensor and the tape, keeps the memory, clears the error.
 * Tensors of this context must not be used afterwards. A library built with
 * NB_DEBUG=1 (`make debug`) catches such use: every tensor carries a stamp
 * of its context's reset count, reset overwrites the last step's memory and
 * keeps it out of use for one step, and every op (and nb_get, nb_set,
 * nb_copy, nb_backward, nb_record) refuses a tensor made before the last
 * reset with NB_ERR_STATE ("used after its context was reset"); nb_get
 * gives NaN. Older tensors point at freed memory: `make test-asan` reports
 * those. */
void nb_ctx_reset(nb_ctx *ctx);

/* The first error's message, or NULL when there is none ("NULL context"
 * for a NULL ctx). */
const char *nb_ctx_error(const nb_ctx *ctx);
/* The first error's status, NB_OK when none; NB_ERR_NULL for a NULL ctx. */
nb_status nb_ctx_status(const nb_ctx *ctx);
/* Clears the error so the context can be used again. */
void nb_ctx_clear_error(nb_ctx *ctx);
/* Records an error (if none is recorded yet) and returns `s`. For custom ops
 * and wrappers; the message is printf-formatted. A NULL fmt, or one that
 * formats to "", records the status with a generic message; a NULL ctx
 * records nothing. */
nb_status nb_ctx_fail(nb_ctx *ctx, nb_status s, const char *fmt, ...) NB_PRINTF_LIKE(3, 4);

/* Gradient recording. With it off (PyTorch's torch.no_grad()) ops compute
 * values but record nothing. Returns the previous setting. */
bool nb_set_grad_enabled(nb_ctx *ctx, bool enabled);
bool nb_is_grad_enabled(const nb_ctx *ctx);

/* Where the next recorded ops were created, kept on each node for tape dumps
 * and anomaly reports. `file` must outlive the context (a string literal).
 * NB_HERE(ctx) sets it to the current line. */
void nb_ctx_set_site(nb_ctx *ctx, const char *file, int line);
#define NB_HERE(ctx) nb_ctx_set_site((ctx), __FILE__, __LINE__)

/* Module scopes, for the teaching views: ops recorded between
 * nb_ctx_push_scope(ctx, "attn", __FILE__, __LINE__) and the matching
 * nb_ctx_pop_scope(ctx) belong to the module path of the enclosing scopes
 * joined by dots ("h.0" then "attn": "h.0.attn"; a NULL or empty name adds
 * no part, for a module that only marks its own lines). The push sets the
 * creation site to file:line (NB_HERE inside the module moves it on); the
 * pop puts back the site that was current at the push. Each node records
 * its path and its call site: the user's line that called into the model
 * (the site set by the user's code, not the library's, current at the
 * outermost push; for a library op outside every scope, the user's last
 * site). At most NB_SCOPE_MAX deep: a
 * deeper push records NB_ERR_VALUE on ctx (and the pop that matches it is
 * still expected); a pop with no push does nothing. Reset empties the
 * stack. NULL ctx: nothing. */
#define NB_SCOPE_MAX 16
void nb_ctx_push_scope(nb_ctx *ctx, const char *name, const char *file, int line);
void nb_ctx_pop_scope(nb_ctx *ctx);
/* The current module path ("" outside every scope, and for a NULL ctx). */
const char *nb_ctx_scope(const nb_ctx *ctx);
#define NB_SCOPE_PUSH(ctx, name) nb_ctx_push_scope((ctx), (name), __FILE__, __LINE__)

/* Worker threads for the heavy kernels (matmul and linear, softmax, the
 * elementwise ops, dropout, the optimizers), process-wide, in a persistent
 * pool; 1 runs everything on the calling thread. Without a call, the first
 * use reads the NB_NUM_THREADS environment variable (1 when unset).
 * Results are bit-identical for every thread count: work is split only over
 * independent outputs, and small tensors stay on the caller. Returns the
 * count now in use (it may be lower if threads could not be started). Call
 * nb_set_num_threads(1) before exit to join the workers. Not for use from
 * several threads at once. */
int nb_set_num_threads(int n);
int nb_get_num_threads(void);

/* Guest threads: threads of your own (not the pool's) that join the pool's
 * jobs while a flag of yours is set, for a core that is idle only at times.
 * nb_set_guest_threads(n) splits every job into threads + n shares; a share
 * no guest works on is run by the pool's threads, so nothing waits for a
 * guest that never comes. nb_guest_serve(slot, go) makes the calling
 * thread guest `slot` (0 .. n-1; one thread per slot at a time) until *go
 * is 0: it takes chunks of the jobs, between chunks it looks at *go, and it
 * returns at once when *go is 0. The bits stay those of one thread. The
 * MPI driver (tools/mpi/dp.h) lends a waiting rank's core to a rank
 * still computing this way. Set the count while no job runs. */
int nb_set_guest_threads(int n);
void nb_guest_serve(int slot, const nb_atomic_int *go);

/* Memory statistics: bytes handed out since the last reset, bytes held, and
 * how many times the context has called malloc in its life. */
size_t nb_ctx_mem_used(const nb_ctx *ctx);
size_t nb_ctx_mem_reserved(const nb_ctx *ctx);
size_t nb_ctx_mallocs(const nb_ctx *ctx);

/* Allocates `bytes` (64-byte aligned, zeroed) in the context's arena. For
 * custom ops that need scratch space. NULL and an error on failure. */
void *nb_ctx_alloc(nb_ctx *ctx, size_t bytes);

/* ------------------------------------------------------------------------
 * Tensors.
 *
 * Always contiguous, row-major. Fields may be read freely; write only
 * through `data` (and `grad`). */
typedef struct nb_node nb_node;

typedef struct nb_tensor {
    nb_dtype dtype;
    int ndim;                   /* 0..NB_MAX_DIMS; 0 is a scalar */
    int64_t shape[NB_MAX_DIMS]; /* shape[i] >= 0 for i < ndim (a 0 makes an empty tensor,
                                 * as in PyTorch); unused entries are 1 */
    size_t numel;               /* product of shape (1 for a scalar, 0 when a dim is 0) */
    void *data;                 /* numel elements of dtype */
    void *grad;                 /* same dtype and numel, or NULL until a backward reaches it */
    bool requires_grad;         /* a leaf the user marked, or the result of such */
    bool grad_stale;            /* grad holds old values, to be read as zeros: the training
                                 * step's zero_grad, deferred (nb_train_step_run); the next
                                 * gradient written to it stores rather than adds */
    nb_node *node;              /* the op that made it; NULL for leaves */
    nb_ctx *owner;              /* the context whose arena holds it */
    const char *name;           /* optional label for printing and graphs */
    uint32_t stamp;             /* which reset of owner made it (see nb_ctx_reset) */
    struct nb_tensor *tangent;  /* forward mode: the tangent it carries, or NULL (zero);
                                 * read it with nb_tangent, which finishes computing it */
} nb_tensor;

/* Shape arguments are (ndim, const int64_t *shape). NB_SHAPE(2, 3) expands to
 * both: nb_zeros(ctx, NB_F32, NB_SHAPE(2, 3)). */
#ifdef __cplusplus /* C++ has no compound literals: an initializer list */
#define NB_SHAPE(...)                                                     \
    (int)std::initializer_list<int64_t>{__VA_ARGS__}.size(),              \
        std::initializer_list<int64_t>{__VA_ARGS__}.begin()
#else
#define NB_SHAPE(...)                                                     \
    (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),            \
        (const int64_t[]) { __VA_ARGS__ }
#endif

/* Creation. All return NULL and record an error on the context for NULL
 * shape pointers, ndim outside 0..8, negative dims, or element counts whose
 * byte size would overflow size_t. A dim of 0 makes an empty tensor (numel
 * 0), as in PyTorch.
 *
 * nb_empty leaves the data uninitialised, like torch.empty: write every
 * element before reading it (an op's output, a batch being filled). A
 * library built with NB_DEBUG=1 (`make debug`) fills it with 0xFF bytes
 * (NaN for f32/f64, -1 for i64, 0xFF for bool), so reading an element never
 * written shows up. nb_zeros is the zero-filled one. */
nb_tensor *nb_empty(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_zeros(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_ones(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape);
nb_tensor *nb_full(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, double value);
/* Copies numel elements of `dt` from `data`. */
nb_tensor *nb_from_data(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, const void *data);
/* Converts numel doubles to `dt` (handy for writing one test for both dtypes). */
nb_tensor *nb_from_doubles(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, const double *values);
nb_tensor *nb_scalar(nb_ctx *ctx, nb_dtype dt, double value); /* 0-dim */

struct nb_pcg32;
/* U[lo, hi) and N(mean, std^2), drawn in row-major order from `rng`. As in
 * PyTorch, lo > hi (or an infinite hi - lo) and std < 0 (or NaN) are
 * NB_ERR_VALUE errors; a NULL rng is NB_ERR_NULL. */
nb_tensor *nb_uniform(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, double lo,
                      double hi, struct nb_pcg32 *rng);
nb_tensor *nb_normal(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape, double mean,
                     double std, struct nb_pcg32 *rng);

/* A copy of `t` in `ctx` (no grad, no history), optionally in another dtype.
 * Like PyTorch's t.detach().to(dtype).clone(). */
nb_tensor *nb_copy(nb_ctx *ctx, const nb_tensor *t, nb_dtype dt);

/* Marks a leaf as needing a gradient and allocates its grad (zeros) in its
 * own context. Returns the tensor; NULL if t is NULL, not floating, or not a
 * leaf (the error goes on t's context). */
nb_tensor *nb_requires_grad(nb_tensor *t);

/* Sets t->grad to zero (if it has one). NULL is a no-op. */
void nb_zero_grad(nb_tensor *t);

/* Element access by flat row-major index, converting to/from double.
 * Out-of-range indices or NULL give NaN (get) or do nothing (set). Storing
 * NaN, an infinity or a value outside [-2^63, 2^63) into an i64 tensor
 * leaves the element unchanged and records NB_ERR_VALUE on t's context
 * (the C conversion would be undefined); other values are truncated toward
 * zero. nb_full, nb_from_doubles and nb_copy to i64 refuse such values the
 * same way. */
double nb_get(const nb_tensor *t, size_t i);
void nb_set(nb_tensor *t, size_t i, double v);
double nb_grad_get(const nb_tensor *t, size_t i); /* 0 when there is no grad */
/* The value of a one-element tensor (PyTorch's .item()); NaN otherwise. */
double nb_item(const nb_tensor *t);

/* True when a and b have the same ndim and shape. */
bool nb_same_shape(const nb_tensor *a, const nb_tensor *b);

/* Writes "(2, 6, 3)" into buf (always terminated); returns buf. "(NULL)"
 * for NULL. */
char *nb_shape_str(const nb_tensor *t, char *buf, size_t n);

/* Prints exactly as PyTorch 1.13 prints t.detach(): "tensor([[0.4421, 0.5931],
 * ...])" with 4 decimals, aligned columns and nested brackets; "2." when
 * every value is whole; scientific notation ("tensor([1.0000e-10,
 * 1.0000e+00])") when PyTorch uses it; past 1000 elements the first and
 * last 3 of each long dim with "..."; ", dtype=torch.float64" for f64.
 * `nb_print` adds a newline. NULL prints "None". */
void nb_fprint(FILE *f, const nb_tensor *t);
/* torch.set_printoptions: digits after the point (default 4), how many
 * elements print in full (1000), items at each end of a summarized dim (3),
 * characters per line (80), and scientific notation: NB_SCI_AUTO (PyTorch's
 * None: chosen from the values), 0 never, 1 always. A negative precision,
 * threshold, edgeitems or linewidth keeps the current value (PyTorch's
 * None); sci_mode is always set, as in PyTorch. Process-wide, like
 * PyTorch's; not thread-safe. nb_reset_printoptions restores the defaults
 * (torch.set_printoptions(profile="default")). */
#define NB_SCI_AUTO (-1)
void nb_set_printoptions(int precision, int64_t threshold, int edgeitems, int linewidth,
                         int sci_mode);
void nb_reset_printoptions(void);
void nb_print(const nb_tensor *t);
/* Prints the gradient the same way ("None" when there is none). */
void nb_print_grad(const nb_tensor *t);

/* ------------------------------------------------------------------------
 * Named tensor lists: a module's parameters under PyTorch's state_dict
 * names, an optimizer's parameters and state, a checkpoint's contents. The
 * list does not own the names or tensors (they usually live in a context).
 *
 * A list has no fixed capacity. Start it empty with `nb_tensor_list l = {0};`.
 * The first NB_LIST_MAX entries are kept in the struct itself; entries
 * beyond them go to heap storage that nb_list_free releases. A list that
 * never held more than NB_LIST_MAX entries owns no heap storage, so not
 * calling nb_list_free on it leaks nothing. Read entries with
 * nb_list_name(l, i) and nb_list_tensor(l, i), which work for every i < n;
 * the arrays names[i] and t[i] hold only entries i < NB_LIST_MAX. A struct
 * copy of a grown list shares the original's heap storage: free only one. */
#define NB_LIST_MAX 256 /* entries kept inside the struct */

typedef struct nb_tensor_list {
    int n;                          /* entries, 0 <= n <= NB_LIST_MAX + more_cap */
    const char *names[NB_LIST_MAX]; /* entries 0..NB_LIST_MAX-1 */
    nb_tensor *t[NB_LIST_MAX];
    int more_cap;                   /* heap entries allocated past NB_LIST_MAX */
    const char **more_names;        /* entries NB_LIST_MAX.., more_cap of them */
    nb_tensor **more_t;
} nb_tensor_list;

/* Appends (name, t). NB_ERR_NULL for NULL arguments, NB_ERR_VALUE when the
 * name is already there or the list is corrupt (n negative or past its
 * storage), NB_ERR_MEMORY when the heap storage cannot grow, NB_ERR_SIZE
 * past INT_MAX entries. The list is unchanged on failure. A list has no
 * context, so the message ("list_add: 'W' is already in the list") is
 * recorded on t's context, t->owner; a NULL t gives NB_ERR_NULL alone. */
nb_status nb_list_add(nb_tensor_list *l, const char *name, nb_tensor *t);
/* The tensor called `name`, or NULL (also for a NULL or corrupt list). */
nb_tensor *nb_list_get(const nb_tensor_list *l, const char *name);
/* Entry i's name and tensor; NULL when i is outside 0..n-1 or l is NULL or
 * corrupt. */
const char *nb_list_name(const nb_tensor_list *l, int i);
nb_tensor *nb_list_tensor(const nb_tensor_list *l, int i);
/* Releases the list's heap storage (if it has any) and empties it (n = 0).
 * The names and tensors are not touched. NULL is a no-op. */
void nb_list_free(nb_tensor_list *l);

/* ------------------------------------------------------------------------
 * The tape and backward.
 *
 * Each op whose inputs require grad appends a node (op, inputs, output,
 * saved values, creation site) to its context's tape. The tape is in creation
 * order, which is already a topological order, so backward walks it in
 * reverse: every node's output gradient is complete before its own rule runs,
 * however often the node's output was reused. */

/* Backward from `out`. With grad_out NULL, `out` must have one element and
 * its gradient is taken as 1 (a scalar loss). Otherwise grad_out must have
 * out's shape (else NB_ERR_SHAPE) and dtype (else NB_ERR_DTYPE). Gradients accumulate (+=) into every tensor that
 * requires grad; leaves keep theirs until nb_zero_grad. Intermediate
 * gradients stay readable until the context is reset.
 *
 * A second backward over the same tape is allowed and behaves like
 * PyTorch's backward(retain_graph=True): intermediate gradients restart from
 * zero and the leaves receive the gradient once more (so two calls double
 * a leaf's gradient). The saved forward values are kept until the reset. */
nb_status nb_backward(nb_ctx *ctx, nb_tensor *out, const nb_tensor *grad_out);

/* ------------------------------------------------------------------------
 * Gradients as tensors, to any order: PyTorch's torch.autograd.grad.
 *
 *   nb_tensor *g;                                  // dy/dx, a tensor of ctx
 *   nb_grad_opts o = {.create_graph = true};
 *   nb_grad(ctx, 1, &y, NULL, 1, &x, &o, &g);
 *   nb_tensor *penalty = nb_sum(ctx, nb_mul(ctx, g, g));
 *   nb_backward(ctx, penalty, NULL);               // second order: into x->grad
 *
 * Without create_graph the local rules nb_backward runs compute the
 * gradients, as fast, into new tensors; with it every op's backward is
 * itself recorded from ops (see nabla/ops.def's formulas), so the
 * gradients can be differentiated again. */
/* How nb_hvp takes a Hessian-vector product (nb_grad_opts.hvp_mode). */
typedef enum nb_hvp_mode {
    NB_HVP_AUTO,    /* forward-over-reverse when every op on the tape has a forward-mode rule */
    NB_HVP_REV_REV, /* reverse-over-reverse: the gradient of <nb_grad(y, create_graph), v> */
    NB_HVP_FWD_REV  /* forward-over-reverse, falling back to REV_REV past a custom op without a rule */
} nb_hvp_mode;
typedef struct nb_grad_opts {
    bool create_graph; /* record the backward, so the returned gradients can be differentiated again */
    bool allow_unused; /* an input the outputs do not reach gets NULL instead of an error */
    nb_hvp_mode hvp_mode; /* nb_hvp only; 0 is NB_HVP_AUTO */
} nb_grad_opts;
/* Gradients of sum_i <outputs[i], grad_outputs[i]> with respect to inputs[j], as new tensors in ctx
 * (grads[j], inputs[j]'s shape and dtype). grad_outputs NULL: every output must be a scalar (seed 1).
 * The .grad buffers are not touched. opts NULL: both false.
 * The outputs must be recorded on ctx's tape (or be inputs themselves);
 * the walk goes only through the ops between the inputs and the outputs.
 * Errors (the status, and the message on ctx): an input or output that
 * does not require grad (NB_ERR_STATE), a grad_output of another shape
 * (NB_ERR_SHAPE) or dtype (NB_ERR_DTYPE), an input the outputs do not reach
 * (NB_ERR_VALUE, unless allow_unused), and, with create_graph, a custom op
 * that declared no graph backward (nb_node_set_graph_backward): NB_ERR_STATE,
 * the op named, the same status nb_hvp, nb_jvp and nb_gradgradcheck give
 * for it. grads[j] are NULL on error. */
nb_status nb_grad(nb_ctx *ctx, int n_out, nb_tensor *const *outputs, nb_tensor *const *grad_outputs,
                  int n_in, nb_tensor *const *inputs, const nb_grad_opts *opts, nb_tensor **grads);
/* Hessian-vector product of a scalar y of the inputs: hv[j] = sum_i
 * d^2 y / (d inputs[j] d inputs[i]) v[i], as the second output of
 * torch.autograd.functional.hvp(f, inputs, v) (y = f(inputs), built
 * already); an input the product does not reach gets zeros. With g =
 * nb_grad(y, inputs, create_graph), by one of:
 *   forward-over-reverse: v pushed through the forward and g's recorded
 *     backward by the ops' forward-mode rules, one pass (their fused tangent
 *     kernels when nothing records the product);
 *   reverse-over-reverse: the gradient of <g, v>, a second reverse pass.
 * opts->hvp_mode picks: NB_HVP_AUTO (opts NULL or zeroed) and NB_HVP_FWD_REV
 * take forward-over-reverse whenever every op on the tape has a forward-mode
 * rule (it measured faster, docs/gradcheck.md), else reverse-over-reverse
 * (a custom op without nb_node_set_forward_rule); NB_HVP_REV_REV always
 * takes reverse-over-reverse. The two agree to rounding.
 * nb_hvp_last_method(ctx) then says which ran (NB_HVP_FWD_REV or
 * NB_HVP_REV_REV; NB_HVP_AUTO before any nb_hvp on ctx). opts: create_graph
 * to record the product too (allow_unused is implied). v[j] must have
 * inputs[j]'s shape (else NB_ERR_SHAPE) and dtype (else NB_ERR_DTYPE); an
 * hvp_mode outside the enum is NB_ERR_VALUE; other errors as for nb_grad. */
nb_status nb_hvp(nb_ctx *ctx, nb_tensor *y, int n_in, nb_tensor *const *inputs,
                 nb_tensor *const *v, const nb_grad_opts *opts, nb_tensor **hv);
nb_hvp_mode nb_hvp_last_method(const nb_ctx *ctx);
/* Jacobian-vector product (forward mode) of the outputs: ju[i] = sum_j
 * d outputs[i] / d inputs[j] u[j], as the second output of
 * torch.autograd.functional.jvp(f, inputs, u). u is pushed from the inputs
 * to the outputs along the recorded tape by the ops' forward-mode rules
 * (one pass, about a third of the double-backward trick's time on a
 * 256-wide MLP with layer norm in f64; nb_jvp_fwd runs f itself on dual
 * tensors instead), unless a
 * custom op on the tape declared no forward-mode rule: then by the
 * double-backward trick: with w a zero tensor of each output's shape that
 * requires grad, g = nb_grad(outputs, inputs, w, create_graph) = J^T w, and
 * J u is the gradient of <g, u> with respect to w. Zeros where no input
 * reaches an output. opts and errors as for nb_hvp (u[j] against
 * inputs[j]). */
nb_status nb_jvp(nb_ctx *ctx, int n_out, nb_tensor *const *outputs, int n_in,
                 nb_tensor *const *inputs, nb_tensor *const *u, const nb_grad_opts *opts,
                 nb_tensor **ju);

/* ------------------------------------------------------------------------
 * Forward mode (PyTorch's torch.autograd.forward_ad): dual tensors.
 *
 *   nb_tensor *xd = nb_make_dual(ctx, x, v);   // x's value carrying tangent v
 *   nb_tensor *y = nb_tanh(ctx, nb_mul(ctx, xd, xd));
 *   nb_tensor *jv = nb_tangent(y);             // dy/dx v, from the same forward pass
 *
 * Every op whose input carries a tangent computes its output's tangent with
 * its forward-mode rule (one for every op of nabla/ops.def; custom ops
 * declare theirs with nb_node_set_forward_rule). An input without a tangent
 * counts as a zero tangent. The rules are written with recorded ops, so
 * when grad is on a tangent is differentiable like any result: a dual
 * forward can be differentiated in reverse (forward-over-reverse Hessian-
 * vector products, nb_hvp), and the tangent of a reverse pass recorded with
 * nb_grad's create_graph can be pushed forward. One level of tangents:
 * while a rule runs, its own ops carry none.
 *
 * nb_make_dual returns a new tensor of ctx with primal's value (a view: it
 * shares primal's data) carrying tangent, and, when primal requires grad,
 * recorded as primal's reshape, so gradients reach primal. tangent must have
 * primal's shape (else NB_ERR_SHAPE) and dtype (else NB_ERR_DTYPE), both
 * float; NULLs give NB_ERR_NULL. NULL and the error on ctx on failure.
 * nb_tangent returns the tangent reaching t (a tensor of t's shape and
 * dtype), or NULL when none does (t NULL, or no dual among its inputs). */
nb_tensor *nb_make_dual(nb_ctx *ctx, nb_tensor *primal, nb_tensor *tangent);
nb_tensor *nb_tangent(const nb_tensor *t);

/* Anomaly mode (PyTorch's detect_anomaly): after each local rule, checks
 * the gradients it produced; the first NaN or inf stops the backward with an
 * error naming the op, its tape index and its creation site. The forward
 * pass is checked too: a recorded op (custom ones included) whose inputs are
 * all finite but whose output is not fails with an error naming the op, its
 * creation site and the input shapes (masked_fill and causal_fill, whose
 * -inf is the caller's, are exempt). Returns the previous setting. */
bool nb_set_detect_anomaly(nb_ctx *ctx, bool on);

/* Number of nodes on the tape. */
int nb_tape_len(const nb_ctx *ctx);
/* Prints the tape, one node a line: index, op, input and output shapes
 * (after the tensor's name when it has one: parameters show their module
 * path, "W_query.weight (2, 3)*"), creation site. For teaching and
 * debugging. NB_OK, NB_ERR_NULL, NB_ERR_MEMORY or NB_ERR_IO (a write
 * failed; f is flushed to find out), the message recorded on ctx. The tape
 * views (this, nb_tape_dot, nb_tape_html, nb_tape_json) also work on a
 * context that holds an error, to show how it came about; theirs is then
 * not recorded (the first error is kept) but still returned. */
nb_status nb_tape_print(nb_ctx *ctx, FILE *f);
/* Writes the tape as a Graphviz digraph (render with `dot -Tsvg`): a box per
 * tensor with its shape, first values and gradient, an ellipse per op with
 * its tape index and creation site, arrows in the forward direction. With
 * root non-NULL only the ops up to root's are drawn. NB_OK, NB_ERR_NULL,
 * NB_ERR_MEMORY or NB_ERR_IO (a write failed), recorded on ctx as for
 * nb_tape_print. */
nb_status nb_tape_dot(nb_ctx *ctx, const nb_tensor *root, FILE *f);

/* ------------------------------------------------------------------------
 * Custom ops.
 *
 * Compute the forward result yourself into a tensor made with nb_empty on
 * the context (uninitialised: write every element), then record it with
 * nb_record. Your backward is called once, when backward reaches the node;
 * it reads nb_node_output(n)->grad and adds (+=) into the buffers
 * nb_grad_buffer() gives for each input (NULL for inputs that need no
 * gradient).
 *
 * Implement both float dtypes, f32 and f64: nb_gradcheck runs everything in
 * f64. The output must have its float inputs' dtype; nb_record refuses
 * (NB_ERR_DTYPE, "<name>: custom op does not implement f64: ...") an op
 * that returns f32 for f64 inputs, or the reverse. */
typedef void (*nb_backward_fn)(nb_ctx *ctx, nb_node *node);

/* Records `out` as the result of `name`(in[0..n_in-1]). Does nothing and
 * returns NULL when no input requires grad or grad is disabled, unless an
 * input carries a tangent (forward mode): then the node is made, off the
 * tape, so that its forward-mode rule can be declared on it; on success
 * out->requires_grad becomes true. `name` must outlive the context.
 * NB_ERR_STATE when out was already recorded by a node (an output belongs to
 * one node) and NB_ERR_VALUE when out is also one of the inputs (a cycle). */
nb_node *nb_record(nb_ctx *ctx, const char *name, nb_tensor *out, int n_in,
                   nb_tensor *const *in, nb_backward_fn backward, void *userdata);

nb_tensor *nb_node_input(const nb_node *n, int i);
int nb_node_num_inputs(const nb_node *n);
nb_tensor *nb_node_output(const nb_node *n);
void *nb_node_userdata(const nb_node *n);
const char *nb_node_name(const nb_node *n);
/* The grad buffer of t (allocated and zeroed on first use), or NULL when t
 * needs no gradient. */
void *nb_grad_buffer(nb_ctx *ctx, nb_tensor *t);

/* A custom op's backward built from recorded ops, for gradients of
 * gradients (nb_grad with create_graph): given dout (the gradient at the
 * node's output, a tensor on ctx), set din[i] to the gradient of input i
 * (a tensor of its shape computed with nabla's ops on ctx, so that it is
 * recorded), or leave it NULL for none. It must compute the same values as
 * the node's nb_backward_fn: nb_gradgradcheck compares the two and names
 * the op when they differ. */
typedef void (*nb_graph_backward_fn)(nb_ctx *ctx, nb_node *node, nb_tensor *dout,
                                     nb_tensor **din);
/* Declares node's graph backward (n from nb_record; NULL n is a no-op). */
void nb_node_set_graph_backward(nb_node *n, nb_graph_backward_fn fn);

/* A custom op's forward-mode rule: given the tangents of its inputs
 * (tangents[i], input i's shape, or NULL for a zero tangent) return the
 * tangent of the node's output (its shape and dtype), J times the inputs'
 * tangents, computed with nabla's ops on ctx so that it is recorded when
 * grad is on; NULL means a zero tangent. It runs once the op has returned
 * (before the next op is recorded or nb_tangent reads it). A dual tensor
 * reaching a custom op without one is an error naming the op
 * (NB_ERR_STATE); nb_gradcheck's check_forward_ad checks the rule. */
typedef nb_tensor *(*nb_forward_fn)(nb_ctx *ctx, nb_node *node, nb_tensor *const *tangents);
/* Declares node's forward-mode rule (n from nb_record; NULL n is a no-op). */
void nb_node_set_forward_rule(nb_node *n, nb_forward_fn fn);

#ifdef __cplusplus
}
#endif
#endif
