/* nb_internal.h - what the library's files share and users do not see:
 * the context and node records, checked allocation, input validation and the
 * dtype dispatch used by every kernel. */
#ifndef NB_INTERNAL_H
#define NB_INTERNAL_H

#include "nabla.h"

#include <math.h>
#include <string.h>

#if defined(__GNUC__)
#define NB_HIDDEN __attribute__((visibility("hidden")))
#else
#define NB_HIDDEN
#endif

/* NB_HOT marks the plain-C row loops that dominate a step outside the gemm
 * (layer_norm's rows and columns, the fused attention's tiles): the
 * compiler builds each twice, for x86-64 with AVX-512 (x86-64-v4) and for
 * the baseline, and the loader picks one for the CPU (an ifunc). Both
 * clones compute the same bits: the build has -ffp-contract=off (no fused
 * multiply-adds the source does not write) and no reassociation, so wider
 * vectors only do the same elementwise operations more at a time, and
 * every sum keeps the partial sums its source spells out. Off with
 * -DNB_NO_AVX2, off the x86-64 glibc targets, and under the sanitizers,
 * whose start-up runs after the loader resolves ifuncs. */
#if defined(__x86_64__) && defined(__GLIBC__) && (defined(__GNUC__) || defined(__clang__)) && \
    !defined(NB_NO_AVX2) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || \
    __has_feature(memory_sanitizer)
#define NB_HOT_OFF 1
#endif
#endif
#ifndef NB_HOT_OFF
#define NB_HOT __attribute__((target_clones("arch=x86-64-v4", "default")))
#endif
#endif
#ifndef NB_HOT
#define NB_HOT
#endif

/* ---- arena ---------------------------------------------------------------- */
typedef struct nb_chunk {
    struct nb_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
} nb_chunk;

#define NB_ERRMSG 512

struct nb_ctx {
    nb_chunk *chunks;      /* newest first; reset merges them into one */
    size_t reserved;       /* sum of chunk sizes */
    size_t used;           /* bytes handed out since the last reset */
    size_t peak;           /* the most `used` has been in this context's life */
    size_t mallocs;        /* malloc calls made by this context */
    nb_node *tape;         /* the newest node; nodes link to older ones */
    int tape_len;
    uint32_t generation;   /* resets so far; tensors carry it in their stamp */
    nb_chunk *quarantine;  /* NB_DEBUG: the last step's chunks, overwritten, not reused */
    bool grad_enabled;
    bool backward_done;    /* a backward pass has run over this tape */
    bool detect_anomaly;   /* check every gradient for NaN/inf */
    struct nb_probe *probe; /* watches the tape (gradcheck's blame); NULL normally */
    const char *site_file; /* creation site for the next nodes */
    int site_line;
    nb_status status;
    char errmsg[NB_ERRMSG];
    /* Gradient recycling (nb_train_step_run's backward): when on, the
     * gradient of a node's output is handed back after that node's backward
     * ran, and the next gradient of the same size reuses it. */
    bool recycle_grads;
    struct nb_free_grad *free_grads; /* handed-back buffers; reset empties it */
};

/* Hands t's gradient buffer back to ctx's free list (t->grad becomes NULL)
 * when ctx->recycle_grads is on and t lives in ctx; a no-op otherwise. */
NB_HIDDEN void nb_grad_release(nb_ctx *ctx, nb_tensor *t);
/* nb_grad_buffer for a backward that writes every element of the gradient:
 * when t has no buffer yet, one is made without zeroing it and *fresh is
 * set, and the caller must then store (=) every element rather than add.
 * Otherwise as nb_grad_buffer, *fresh false. Saves clearing a buffer that
 * is overwritten at once (the activations' gradients of a training step).
 * A caller that takes two inputs' buffers must write the first before it
 * asks for the second: they may be the same tensor. */
NB_HIDDEN void *nb_grad_buffer_fresh(nb_ctx *ctx, nb_tensor *t, bool *fresh);
/* In a recycling backward (ctx->recycle_grads: the output's gradient is
 * handed back right after its node), a node whose input t has no gradient
 * yet and would get an exact copy of the output's takes the output's
 * buffer instead (same size and type): t->grad = out->grad, out->grad =
 * NULL. Returns whether it did; the caller copies or adds otherwise. */
NB_HIDDEN bool nb_grad_take(nb_ctx *ctx, nb_tensor *t, nb_tensor *out);
/* The free list (emptied by reset): nb_ctx_give_back hands a buffer of ctx
 * (`bytes` as allocated) back; nb_ctx_reuse takes one of exactly `bytes`
 * (contents undefined) or gives NULL; nb_ctx_scratch is nb_ctx_reuse, else
 * nb_ctx_alloc_raw: for an op's temporary buffers, given back when done. */
NB_HIDDEN void nb_ctx_give_back(nb_ctx *ctx, void *p, size_t bytes);
NB_HIDDEN void *nb_ctx_reuse(nb_ctx *ctx, size_t bytes);
NB_HIDDEN void *nb_ctx_scratch(nb_ctx *ctx, size_t bytes);

/* nb_ctx_alloc without the zero fill, and an nb_empty whose data is not
 * zeroed: only for buffers the caller overwrites completely (an op's output
 * that its forward kernel writes in full). Gradients and anything
 * accumulated into must come zeroed. */
NB_HIDDEN void *nb_ctx_alloc_raw(nb_ctx *ctx, size_t bytes);
NB_HIDDEN nb_tensor *nb_empty_raw(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape);

/* ---- tape -------------------------------------------------------------- */
#define NB_NODE_MAX_INPUTS 4 /* more (concat) spill into `in` from the arena */

struct nb_node {
    int op;                  /* nb_op; NB_OP_CUSTOM for user ops */
    const char *name;        /* op name shown in dumps and errors */
    nb_backward_fn backward; /* the op's local rule */
    nb_tensor *out;
    int n_in;
    nb_tensor **in;          /* n_in inputs (points at in_small when they fit) */
    nb_tensor *in_small[NB_NODE_MAX_INPUTS];
    /* Op parameters and what the forward saved for backward. */
    double f[4];
    int64_t i[4];
    void *saved;             /* e.g. dropout's mask, max's arg-max, softmax's output */
    nb_tensor *saved_t;
    void *userdata;          /* custom ops */
    const char *file;        /* creation site (may be NULL) */
    int line;
    int index;               /* position on the tape, from 0 */
    nb_node *prev;           /* the node recorded before this one */
};

/* Records a built-in op. Same contract as nb_record. */
NB_HIDDEN nb_node *nb_record_op(nb_ctx *ctx, nb_op op, nb_tensor *out, int n_in,
                                nb_tensor *const *in, nb_backward_fn backward);

/* A tape observer, installed by setting ctx->probe (nb_gradcheck uses one
 * to find the op whose backward is wrong). `recorded` runs when a node joins
 * the tape: its output is computed and may be changed, and ops recorded
 * later read the change. `backward` runs before (done false) and after
 * (done true) each local rule in nb_backward. */
typedef struct nb_probe {
    void (*recorded)(struct nb_probe *p, nb_node *n);
    void (*backward)(struct nb_probe *p, nb_node *n, bool done);
} nb_probe;

/* ---- checks shared by the ops ---------------------------------------------- */
/* True when the context can run an op (non-NULL, no error yet). */
NB_HIDDEN bool nb_ctx_ok(nb_ctx *ctx);
/* Validates n float inputs of one dtype for op `name`; records the error and
 * returns false otherwise. */
NB_HIDDEN bool nb_check_float_inputs(nb_ctx *ctx, const char *name, int n, nb_tensor *const *in);
/* Normalises a possibly negative dim against ndim; -1 with an error if out of
 * range. */
NB_HIDDEN int nb_norm_dim(nb_ctx *ctx, const char *name, const nb_tensor *t, int dim);
/* Computes the broadcast shape of a and b into shape/ndim; error if they do
 * not broadcast. */
NB_HIDDEN bool nb_broadcast_shape(nb_ctx *ctx, const char *name, const nb_tensor *a,
                                  const nb_tensor *b, int *ndim, int64_t *shape);
/* Strides of `t` seen through an output of `ndim` dims (right-aligned), with 0
 * on broadcast dims; 4 entries, leading ones for absent dims. */
NB_HIDDEN void nb_broadcast_strides(const nb_tensor *t, int ndim, const int64_t *oshape,
                                    int64_t *stride4);
/* Writes nd integers as "(2, 3)" into buf (always terminated; "()" for nd
 * 0), between brackets[0] and brackets[1]: "()" for shapes, "[]" for index
 * lists. Returns buf. nb_shape_str is this for a tensor's shape. */
NB_HIDDEN char *nb_dims_str(int nd, const int64_t *v, const char *brackets, char *buf, size_t n);
/* Pads a shape to 4 dims on the left with ones. */
NB_HIDDEN void nb_shape4(int ndim, const int64_t *shape, int64_t *shape4);

/* A tensor header whose data points at `data` (a view); grad separate. */
NB_HIDDEN nb_tensor *nb_view_of(nb_ctx *ctx, nb_tensor *src, int ndim, const int64_t *shape);

/* Lists (core/list.c): is l usable (n within its storage)? And an append
 * with no checks on name (may be NULL) or duplicates: NB_ERR_VALUE for a
 * corrupt list, NB_ERR_MEMORY/NB_ERR_SIZE when it cannot grow. */
NB_HIDDEN bool nb_list_valid(const nb_tensor_list *l);
NB_HIDDEN nb_status nb_list_append(nb_tensor_list *l, const char *name, nb_tensor *t);

/* Does the optimizer update exactly these tensors under these names
 * (train/optim.c, for checkpoints)? why[] names the first difference. */
NB_HIDDEN bool nb_optim_matches(const nb_optim *o, const nb_tensor_list *params, char *why,
                                size_t n);

/* Use after reset (NB_DEBUG builds; always true otherwise): are the
 * non-NULL in[0..n-1] tensors made since their context's last reset? The
 * first that is not gets an NB_ERR_STATE error on ctx naming op. */
NB_HIDDEN bool nb_check_live(nb_ctx *ctx, const char *op, int n, const nb_tensor *const *in);
/* The stamp a tensor made now in ctx carries (checked by nb_check_live). */
NB_HIDDEN uint32_t nb_ctx_stamp(const nb_ctx *ctx);

/* Can v be converted to int64_t (truncating) without undefined behaviour? */
NB_HIDDEN bool nb_fits_i64(double v);

/* Adds src (numel elements of dt) into dst. */
NB_HIDDEN void nb_accumulate(nb_dtype dt, void *dst, const void *src, size_t numel);

/* ---- file errors (safetensors.c) -------------------------------------------- */
/* Records "<op>: <path>: <message>" on ctx (the message printf-formatted;
 * "(NULL path)" for a NULL path) and returns s. Used by safetensors and
 * checkpoint I/O. */
NB_HIDDEN nb_status nb_io_fail(nb_ctx *ctx, nb_status s, const char *op, const char *path,
                               const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

/* Failure injection for the file writer (tests/check_io_faults.c): every
 * fwrite, fflush, fsync, fclose and rename a save makes, and the directory
 * fsync after it, first calls nb_io_fault(). It counts the calls in
 * nb_io_fault_calls and, when nb_io_fault_at is n > 0, makes the n-th one
 * fail with EIO (true = fail). Both are 0 outside tests; not thread-safe. */
NB_HIDDEN extern long nb_io_fault_at, nb_io_fault_calls;
NB_HIDDEN bool nb_io_fault(void);

/* ---- UTF-8 (utf8.c) ------------------------------------------------------ */
/* Decodes the code point at s[0..n) (n >= 1) into *cp and returns its
 * length in bytes (1..4), or 0 when s does not start with a valid sequence
 * (overlong forms, surrogates, code points past U+10FFFF and truncated
 * sequences are invalid). */
NB_HIDDEN size_t nb_utf8_next(const unsigned char *s, size_t n, uint32_t *cp);
/* Writes cp (a valid code point) as UTF-8 to out (room for 4 bytes);
 * returns the number of bytes written. */
NB_HIDDEN size_t nb_utf8_put(uint32_t cp, char *out);

/* ---- threads (parallel.c) ------------------------------------------------- */
/* Processes indices [begin, end) of a job. */
typedef void (*nb_range_fn)(void *arg, int64_t begin, int64_t end);
/* The shares a job is split into: the pool's threads plus guest shares. */
NB_HIDDEN int nb_parallel_parts(void);
/* Runs fn over [0, n) split into one contiguous range per thread (inline
 * when there is one thread or fewer than 2 * min_per_thread items). Split
 * only over independent outputs so results do not depend on the count. */
NB_HIDDEN void nb_parallel_for(int64_t n, int64_t min_per_thread, nb_range_fn fn, void *arg);
/* Several independent loops as one job, so the threads wait once, not once
 * a loop: task t runs fn(arg, lo, hi) over its own [0, n). cost is the
 * relative work of one of its items: the threads' shares start where the
 * work before them is equal (a linear's dx and dw, equal multiply-adds,
 * one thread each when two run), and each thread then helps with the
 * others' shares. Below 2 min_cost of work in all, or on one thread, the
 * tasks run inline in order. */
#define NB_MAX_TASKS 4
typedef struct nb_task {
    nb_range_fn fn;
    void *arg;
    int64_t n;
    double cost;
} nb_task;
NB_HIDDEN void nb_parallel_tasks(const nb_task *t, int n_tasks, double min_cost);
/* memcpy split over the pool's threads (64 KB or more a thread). */
NB_HIDDEN void nb_copy_par(void *dst, const void *src, size_t bytes);
/* fn(t, lo, hi, arg) over ranges of the elements of every float gradient in
 * the list (entries without one skipped), split over the pool's threads;
 * each range lies within one tensor. For elementwise work only: which
 * thread takes which range varies. In train/optim.c, beside clipping. */
typedef void (*nb_grad_range_fn)(nb_tensor *t, size_t lo, size_t hi, void *arg);
NB_HIDDEN void nb_grad_ranges(const nb_tensor_list *l, nb_grad_range_fn fn, void *arg);

/* ---- kernels shared by ops (ops/matmul.c) --------------------------------- */
/* c (rows, cols) += a (rows, inner) @ b (inner, cols), or c = a @ b when
 * !add (c is then not read, so it may be uninitialised). c is contiguous
 * (rows `cols` apart); a's element (i, p) is a[i * ars + p * acs] and b's
 * (p, j) is b[p * brs + j * bcs], so transposed operands are just other
 * strides. Each element of c is computed the same way whatever rows or
 * columns a call covers, so callers may split c's rows or columns over
 * threads. */
NB_HIDDEN void nb_gemm_float(float *c, const float *a, int64_t ars, int64_t acs, const float *b,
                             int64_t brs, int64_t bcs, int64_t rows, int64_t inner, int64_t cols,
                             bool add);
/* The same product on every thread of the pool, split over c's rows, the
 * same bits for any thread count. With bias (cols floats, add false) each
 * row of c is bias plus the product. The calling thread packs b once
 * (kept in a buffer of its own) and the threads share it. */
NB_HIDDEN void nb_gemm_float_par(float *c, const float *bias, const float *a, int64_t ars,
                                 int64_t acs, const float *b, int64_t brs, int64_t bcs,
                                 int64_t rows, int64_t inner, int64_t cols, bool add);
/* n such products and n_extra more tasks (a bias gradient) as one job when
 * they number NB_MAX_TASKS or fewer (else in several): the threads wait
 * once, and with two threads each starts on a product of its own when
 * their work is equal (a linear's dx and dw). The products must not write
 * what another reads or writes. */
typedef struct nb_gemm_desc {
    float *c;
    const float *bias, *a;
    int64_t ars, acs;
    const float *b;
    int64_t brs, bcs, rows, inner, cols;
    bool add;
} nb_gemm_desc;
NB_HIDDEN void nb_gemm_float_par_n(const nb_gemm_desc *d, int n, const nb_task *extra,
                                   int n_extra);
/* out[k] = nb_linear(x, w[k], b[k]) for k < n (b NULL: no biases), the
 * float32 products as one job (q, k and v from one x): the same values and
 * the same n recorded nodes as n calls. 0, or -1 with the context's error. */
NB_HIDDEN int nb_linear_n(nb_ctx *ctx, nb_tensor *x, int n, nb_tensor *const *w,
                          nb_tensor *const *b, nb_tensor **out);
NB_HIDDEN void nb_gemm_double(double *c, const double *a, int64_t ars, int64_t acs,
                              const double *b, int64_t brs, int64_t bcs, int64_t rows,
                              int64_t inner, int64_t cols, bool add);
/* The same with c's rows ldc apart (a block of a wider c). */
NB_HIDDEN void nb_gemm_float_ldc(float *c, int64_t ldc, const float *a, int64_t ars,
                                 int64_t acs, const float *b, int64_t brs, int64_t bcs,
                                 int64_t rows, int64_t inner, int64_t cols, bool add);
NB_HIDDEN void nb_gemm_double_ldc(double *c, int64_t ldc, const double *a, int64_t ars,
                                  int64_t acs, const double *b, int64_t brs, int64_t bcs,
                                  int64_t rows, int64_t inner, int64_t cols, bool add);

/* ---- random bits (pcg32.c) ---------------------------------------------- */
/* n draws of nb_pcg32_next into out: the same bits in the same order, and
 * rng ends where n nb_pcg32_next calls leave it, only faster. */
NB_HIDDEN void nb_pcg32_fill(nb_pcg32 *rng, uint32_t *out, size_t n);
/* Moves rng delta draws on, as delta nb_pcg32_next calls would, in
 * O(log delta) steps. */
NB_HIDDEN void nb_pcg32_advance(nb_pcg32 *rng, uint64_t delta);

/* ---- dtype dispatch ----------------------------------------------------------- */
/* Runs KERNEL(T) with T = float or double. Each kernel is written once, as a
 * macro body over T, and instantiated for both float dtypes. */
#define NB_DISPATCH(dt, KERNEL)        \
    do {                               \
        if ((dt) == NB_F32) {          \
            KERNEL(float)              \
        } else {                       \
            KERNEL(double)             \
        }                              \
    } while (0)

#define NB_UNUSED(x) (void)(x)

#endif
