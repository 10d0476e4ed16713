/* core/core_internal.h - what the core layer (contexts, tensors, lists,
 * threads, random bits, input checks) gives the layers above it and users
 * do not see: the context record, checked allocation, input validation, the
 * worker pool and the dtype dispatch. It includes no other layer. */
#ifndef NB_CORE_INTERNAL_H
#define NB_CORE_INTERNAL_H

#include "nabla.h"
#include "core/platform.h"

#include <math.h>
#include <string.h>

/* ---- arena ---------------------------------------------------------------- */
typedef struct nb_chunk {
    struct nb_chunk *next;
    size_t size; /* usable bytes after the header */
    size_t used;
} nb_chunk;

#define NB_ERRMSG 512

/* A creation site: file:line (file NULL when none was set), and whether the
 * library set it (NB_LIB_HERE, a library module's scope) rather than the
 * user's code. */
typedef struct nb_site {
    const char *file;
    int line;
    bool lib;
} nb_site;

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
    /* The creation site for the next nodes, and the last site set from
     * outside the library (nb_ctx_set_site, nb_ctx_push_scope): the user's
     * line that a library site (NB_LIB_HERE) was reached from. */
    nb_site site;
    nb_site user_site;
    /* Module scopes (nb_ctx_push_scope): each level's path (in the arena)
     * and the sites to put back at its pop; scope_depth may pass
     * NB_SCOPE_MAX (those levels are not kept). */
    struct nb_scope {
        const char *path;
        nb_site site, user_site;
    } scopes[NB_SCOPE_MAX];
    int scope_depth;
    nb_status status;
    char errmsg[NB_ERRMSG];
    /* Gradient recycling (nb_train_step_run's backward): when on, the
     * gradient of a node's output is handed back after that node's backward
     * ran, and the next gradient of the same size reuses it. */
    bool recycle_grads;
    struct nb_free_grad *free_grads; /* handed-back buffers; reset empties it */
    /* nb_grad's walk: gradient buffers of tensors of other contexts (the
     * parameters) come from this context's arena, not their own, so that
     * gradients asked for as tensors leave the long-lived contexts alone. */
    bool grad_local;
    /* Forward mode (ops/forward_ad.c): the node whose forward-mode rule
     * runs next (the op that recorded it may still be setting its
     * parameters), and how deep in rules the context is (their own ops
     * carry no tangents). */
    nb_node *fwd_pending;
    int fwd_depth;
    int fwd_in_rule; /* rules running (the composed ones lower fwd_depth, not this) */
    nb_hvp_mode hvp_last; /* how the last nb_hvp took its product (nb_hvp_last_method) */
};

/* The free list (emptied by reset): nb_ctx_give_back hands a buffer of ctx
 * (`bytes` as allocated) back; nb_ctx_reuse takes one of exactly `bytes`
 * (contents undefined) or gives NULL; nb_ctx_scratch is nb_ctx_reuse, else
 * nb_ctx_alloc_raw: for an op's temporary buffers, given back when done. */
NB_HIDDEN void nb_ctx_give_back(nb_ctx *ctx, void *p, size_t bytes);
NB_HIDDEN void *nb_ctx_reuse(nb_ctx *ctx, size_t bytes);
NB_HIDDEN void *nb_ctx_scratch(nb_ctx *ctx, size_t bytes);

/* nb_ctx_alloc without the zero fill: only for buffers the caller
 * overwrites completely (nb_empty's data, scratch a kernel writes in full).
 * Gradients and anything accumulated into must come zeroed. */
NB_HIDDEN void *nb_ctx_alloc_raw(nb_ctx *ctx, size_t bytes);

/* ---- input checks (checks.c, tensor.c) ---------------------------------------------- */
/* True when the context can run an op (non-NULL, no error yet). */
NB_HIDDEN bool nb_ctx_ok(nb_ctx *ctx);
/* Validates n float inputs of one dtype for op `name`; records the error and
 * returns false otherwise. */
NB_HIDDEN bool nb_check_float_inputs(nb_ctx *ctx, const char *name, int n, nb_tensor *const *in);
/* Checks that the present inputs of op are floating and share one dtype,
 * naming them as the op's documentation does (names[i]: "x", "weight",
 * ...). in[i] may be NULL only when optional[i]. */
NB_HIDDEN bool nb_check_named_inputs(nb_ctx *ctx, const char *op, int n, nb_tensor *const *in,
                                     const char *const *names, const bool *optional);
/* Normalises a possibly negative dim against ndim; -1 with an error if out of
 * range. */
NB_HIDDEN int nb_norm_dim(nb_ctx *ctx, const char *name, const nb_tensor *t, int dim);
/* Computes the broadcast shape of a and b into shape/ndim; error if they do
 * not broadcast. */
NB_HIDDEN bool nb_broadcast_shape(nb_ctx *ctx, const char *name, const nb_tensor *a,
                                  const nb_tensor *b, int *ndim, int64_t *shape);
/* Strides of `t` seen through an output of `ndim` dims (right-aligned), with 0
 * on broadcast dims; NB_MAX_DIMS entries, the leading ones for absent dims. */
NB_HIDDEN void nb_broadcast_strides(const nb_tensor *t, int ndim, const int64_t *oshape,
                                    int64_t *stride);
/* Writes nd integers as "(2, 3)" into buf (always terminated; "()" for nd
 * 0), between brackets[0] and brackets[1]: "()" for shapes, "[]" for index
 * lists. Returns buf. nb_shape_str is this for a tensor's shape. */
NB_HIDDEN char *nb_dims_str(int nd, const int64_t *v, const char *brackets, char *buf, size_t n);
/* Pads a shape to NB_MAX_DIMS dims on the left with ones. */
NB_HIDDEN void nb_shape_pad(int ndim, const int64_t *shape, int64_t *padded);

/* Runs BODY over every element of a broadcast (padded to NB_MAX_DIMS dims:
 * shape, and one input's strides s1 and another's s2, 0 where broadcast)
 * in row-major order, with o the output index and i1, i2 the inputs' (the
 * body is the macro's last argument, commas allowed). The
 * last four dims are nested loops; the leading ones, size 1 for tensors of
 * up to four dims, an outer loop whose index is split once per pass. */
#define NB_BCAST_LEAD (NB_MAX_DIMS - 4)
#define NB_BCAST_FOR(shape, s1, s2, ...)                                                  \
    do {                                                                                  \
        int64_t outer_ = 1;                                                               \
        for (int d_ = 0; d_ < NB_BCAST_LEAD; d_++) outer_ *= (shape)[d_];                \
        const int64_t *sh_ = (shape) + NB_BCAST_LEAD, *p1_ = (s1) + NB_BCAST_LEAD,       \
                      *p2_ = (s2) + NB_BCAST_LEAD;                                        \
        size_t o = 0;                                                                     \
        for (int64_t q_ = 0; q_ < outer_; q_++) {                                         \
            int64_t b1_ = 0, b2_ = 0, r_ = q_;                                            \
            for (int d_ = NB_BCAST_LEAD - 1; d_ >= 0; d_--) {                            \
                int64_t i_ = r_ % (shape)[d_];                                            \
                r_ /= (shape)[d_];                                                        \
                b1_ += i_ * (s1)[d_], b2_ += i_ * (s2)[d_];                               \
            }                                                                             \
            for (int64_t i0 = 0; i0 < sh_[0]; i0++)                                       \
                for (int64_t i1_ = 0; i1_ < sh_[1]; i1_++)                                \
                    for (int64_t i2_ = 0; i2_ < sh_[2]; i2_++)                            \
                        for (int64_t i3 = 0; i3 < sh_[3]; i3++, o++) {                    \
                            size_t i1 = (size_t)(b1_ + i0 * p1_[0] + i1_ * p1_[1] +      \
                                                 i2_ * p1_[2] + i3 * p1_[3]);             \
                            size_t i2 = (size_t)(b2_ + i0 * p2_[0] + i1_ * p2_[1] +      \
                                                 i2_ * p2_[2] + i3 * p2_[3]);             \
                            (void)i1, (void)i2;                                           \
                            __VA_ARGS__                                                   \
                        }                                                                 \
        }                                                                                 \
    } while (0)

/* A tensor header whose data points at `data` (a view); grad separate. */
NB_HIDDEN nb_tensor *nb_view_of(nb_ctx *ctx, nb_tensor *src, int ndim, const int64_t *shape);
/* A tensor header in ctx over `data`, which the caller owns (may be NULL:
 * io/'s lazily loaded tensors, whose bytes are still in their file). */
NB_HIDDEN nb_tensor *nb_tensor_over(nb_ctx *ctx, nb_dtype dt, int ndim, const int64_t *shape,
                                    void *data);

/* Lists (core/list.c): is l usable (n within its storage)? And an append
 * with no checks on name (may be NULL) or duplicates: NB_ERR_VALUE for a
 * corrupt list, NB_ERR_MEMORY/NB_ERR_SIZE when it cannot grow. */
NB_HIDDEN bool nb_list_valid(const nb_tensor_list *l);
NB_HIDDEN nb_status nb_list_append(nb_tensor_list *l, const char *name, nb_tensor *t);
/* nb_list_add without its message: the same checks and status, nothing
 * recorded on t's context. For the library's own lists, whose callers
 * report on the context they work with. */
NB_HIDDEN nb_status nb_list_insert(nb_tensor_list *l, const char *name, nb_tensor *t);

/* core/file.c: path opened for reading ("rb") when it is a regular file;
 * otherwise NULL with *why saying what it is instead ("not a regular file
 * (a FIFO)") or strerror's text. Never blocks on a FIFO. */
NB_HIDDEN FILE *nb_fopen_regular(const char *path, const char **why);

/* Use after reset (NB_DEBUG builds; always true otherwise): are the
 * non-NULL in[0..n-1] tensors made since their context's last reset? The
 * first that is not gets an NB_ERR_STATE error on ctx naming op. */
NB_HIDDEN bool nb_check_live(nb_ctx *ctx, const char *op, int n, const nb_tensor *const *in);
/* The stamp a tensor made now in ctx carries (checked by nb_check_live). */
NB_HIDDEN uint32_t nb_ctx_stamp(const nb_ctx *ctx);

/* Can v be converted to int64_t (truncating) without undefined behaviour? */
NB_HIDDEN bool nb_fits_i64(double v);


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

/* `expr` (a tensor) evaluated inside module scope `name` (nb_ctx_push_scope;
 * NULL: no path part, only this line as the ops' site), popped after. */
static inline nb_tensor *nb_nn_scope_end(nb_ctx *ctx, nb_tensor *t) {
    nb_ctx_pop_scope(ctx);
    return t;
}
#define NB_NN_SCOPED(ctx, name, expr) \
    (nb_ctx_push_lib_scope((ctx), (name), __FILE__, __LINE__), nb_nn_scope_end((ctx), (expr)))

/* The library's NB_HERE and scope push: they move the ops' own site to a
 * library line but keep the user's line (ctx->user_site) as the site the
 * ops were called from. nb_ctx_site/nb_ctx_set_site_state save and put
 * back both, around a library call that sets its own sites. */
NB_HIDDEN void nb_ctx_set_lib_site(nb_ctx *ctx, const char *file, int line);
NB_HIDDEN void nb_ctx_push_lib_scope(nb_ctx *ctx, const char *name, const char *file, int line);
#define NB_LIB_HERE(ctx) nb_ctx_set_lib_site((ctx), __FILE__, __LINE__)
typedef struct nb_site_state {
    nb_site site, user_site;
} nb_site_state;
static inline nb_site_state nb_ctx_site(const nb_ctx *ctx) {
    return (nb_site_state){ctx->site, ctx->user_site};
}
static inline void nb_ctx_set_site_state(nb_ctx *ctx, nb_site_state s) {
    ctx->site = s.site;
    ctx->user_site = s.user_site;
}


#endif
