/* tools/wasm/nabla_wasm.c - the C side of nabla.js (the WebAssembly build,
 * docs/wasm.md): what the JavaScript API needs beyond the library's own
 * functions, which it calls directly (the Makefile's WASM_LIB_EXPORTS).
 *
 * Here: tensors from JavaScript numbers with int32 shapes (JavaScript has
 * no int64_t to hand), the random tensors seeded from a number, a tensor's
 * fields (JavaScript does not know the struct's layout), the printed form
 * and the tape's JSON as malloc'ed strings, and nb_gradcheck calling back a
 * JavaScript forward function. Pointers cross as wasm32 numbers. Errors
 * stay where the library puts them: on the context, read by the caller. */
#include <emscripten.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"

/* ---- tensors from JavaScript ------------------------------------------------ */

/* int32 dims to int64 ones; false (and an error on ctx) past NB_MAX_DIMS. */
static bool shape64(nb_ctx *ctx, int ndim, const int32_t *shape, int64_t *out) {
    if (ndim < 0 || ndim > NB_MAX_DIMS) {
        nb_ctx_fail(ctx, NB_ERR_SIZE, "tensor: %d dims (0..%d allowed)", ndim, NB_MAX_DIMS);
        return false;
    }
    for (int i = 0; i < ndim; i++) out[i] = shape[i];
    return true;
}

/* nb_from_doubles with an int32 shape: values has numel doubles. */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_from_doubles(nb_ctx *ctx, int dtype, int ndim,
                                                     const int32_t *shape, const double *values) {
    int64_t s[NB_MAX_DIMS];
    if (!shape64(ctx, ndim, shape, s)) return NULL;
    return nb_from_doubles(ctx, (nb_dtype)dtype, ndim, s, values);
}

/* nb_full with an int32 shape. */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_full(nb_ctx *ctx, int dtype, int ndim, const int32_t *shape,
                                             double value) {
    int64_t s[NB_MAX_DIMS];
    if (!shape64(ctx, ndim, shape, s)) return NULL;
    return nb_full(ctx, (nb_dtype)dtype, ndim, s, value);
}

/* N(mean, std^2) (normal true) or U[lo, hi) drawn from PCG32 seeded
 * (seed, 0): the C program's nb_pcg32_seed(&rng, seed, 0) then nb_normal
 * or nb_uniform gives the same values. seed is a whole number below 2^53. */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_random(nb_ctx *ctx, int dtype, int ndim,
                                               const int32_t *shape, bool normal, double a,
                                               double b, double seed) {
    int64_t s[NB_MAX_DIMS];
    if (!shape64(ctx, ndim, shape, s)) return NULL;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)seed, 0);
    return normal ? nb_normal(ctx, (nb_dtype)dtype, ndim, s, a, b, &rng)
                  : nb_uniform(ctx, (nb_dtype)dtype, ndim, s, a, b, &rng);
}

/* nb_reshape with an int32 shape (one entry may be -1). */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_reshape(nb_ctx *ctx, nb_tensor *a, int ndim,
                                                const int32_t *shape) {
    int64_t s[NB_MAX_DIMS];
    if (!shape64(ctx, ndim, shape, s)) return NULL;
    return nb_reshape(ctx, a, ndim, s);
}

/* nb_split with int32 sizes: the n pieces go to out[0..n-1]. */
EMSCRIPTEN_KEEPALIVE int nb_wasm_split(nb_ctx *ctx, nb_tensor *a, int dim, int n,
                                       const int32_t *sizes, nb_tensor **out) {
    int64_t s[64];
    if (n < 1 || n > 64)
        return (int)nb_ctx_fail(ctx, NB_ERR_SIZE, "split: %d pieces (1..64 allowed)", n);
    for (int i = 0; i < n; i++) s[i] = sizes[i];
    return (int)nb_split(ctx, a, dim, n, s, out);
}

/* nb_dropout with its mask drawn from PCG32 seeded (seed, 0). */
EMSCRIPTEN_KEEPALIVE nb_tensor *nb_wasm_dropout(nb_ctx *ctx, nb_tensor *x, double p, bool train,
                                                double seed) {
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)seed, 0);
    return nb_dropout(ctx, x, p, train, &rng);
}

/* Names the tensor (the tape's views show it): a copy in its context. */
EMSCRIPTEN_KEEPALIVE void nb_wasm_set_name(nb_tensor *t, const char *name) {
    if (!t || !name) return;
    size_t n = strlen(name) + 1;
    char *copy = nb_ctx_alloc(t->owner, n);
    if (!copy) return;
    memcpy(copy, name, n);
    t->name = copy;
}

/* The next recorded ops were made at line `line` of the student's code
 * (the explorer's "site"): file "code", a literal that outlives ctx. */
EMSCRIPTEN_KEEPALIVE void nb_wasm_set_site(nb_ctx *ctx, int line) { nb_ctx_set_site(ctx, "code", line); }

/* ---- a tensor's fields --------------------------------------------------------- */

EMSCRIPTEN_KEEPALIVE int nb_wasm_dtype(const nb_tensor *t) { return (int)t->dtype; }
EMSCRIPTEN_KEEPALIVE int nb_wasm_ndim(const nb_tensor *t) { return t->ndim; }
EMSCRIPTEN_KEEPALIVE double nb_wasm_dim(const nb_tensor *t, int i) { return (double)t->shape[i]; }
EMSCRIPTEN_KEEPALIVE double nb_wasm_numel(const nb_tensor *t) { return (double)t->numel; }
EMSCRIPTEN_KEEPALIVE void *nb_wasm_data(const nb_tensor *t) { return t->data; }
EMSCRIPTEN_KEEPALIVE void *nb_wasm_grad(const nb_tensor *t) { return t->grad; }
EMSCRIPTEN_KEEPALIVE bool nb_wasm_requires(const nb_tensor *t) { return t->requires_grad; }
EMSCRIPTEN_KEEPALIVE nb_ctx *nb_wasm_owner(const nb_tensor *t) { return t->owner; }
EMSCRIPTEN_KEEPALIVE const char *nb_wasm_name(const nb_tensor *t) { return t->name; }

/* ---- text out ------------------------------------------------------------------- */

/* nb_fprint's text (PyTorch's print), or the gradient's with grad true: a
 * malloc'ed string the caller frees; NULL when memory ran out. */
EMSCRIPTEN_KEEPALIVE char *nb_wasm_print(const nb_tensor *t, bool grad) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    if (grad) {
        nb_tensor g = *t; /* the same tensor with its gradient as data */
        g.data = t->grad;
        g.grad = NULL;
        nb_fprint(f, t->grad ? &g : NULL);
    } else {
        nb_fprint(f, t);
    }
    if (fclose(f) != 0) {
        free(text);
        return NULL;
    }
    return text;
}

/* nb_tape_json's text for the tape of ctx up to root (NULL: all of it),
 * malloc'ed; NULL with the error on ctx when it failed. */
EMSCRIPTEN_KEEPALIVE char *nb_wasm_tape_json(nb_ctx *ctx, const nb_tensor *root) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "tape_json: no memory for the text");
        return NULL;
    }
    nb_status s = nb_tape_json(ctx, root, f);
    if (fclose(f) != 0 && s == NB_OK) s = nb_ctx_fail(ctx, NB_ERR_MEMORY, "tape_json: no memory");
    if (s != NB_OK) {
        free(text);
        return NULL;
    }
    return text;
}

/* Records a JavaScript error (a forward function that threw) on ctx. */
EMSCRIPTEN_KEEPALIVE void nb_wasm_fail(nb_ctx *ctx, int status, const char *message) {
    nb_ctx_fail(ctx, (nb_status)status, "%s", message ? message : "");
}

/* Bytes malloc has handed out and not had back: flat over a loop that
 * releases what it builds. */
EMSCRIPTEN_KEEPALIVE double nb_wasm_heap_used(void) {
    struct mallinfo m = mallinfo();
    return (double)m.uordblks;
}

/* ---- gradcheck with a JavaScript forward ---------------------------------------- */

/* Module.nbForward(ctx, in, n) runs the JavaScript function under check on
 * the n tensors at in (made on ctx) and returns its output, or 0 after
 * recording what went wrong on ctx. */
EM_JS(nb_tensor *, js_forward, (nb_ctx * ctx, nb_tensor *const *inputs, int n),
      { return Module.nbForward(ctx, inputs, n); });

static int forward_arity;

static nb_tensor *forward(nb_ctx *ctx, nb_tensor *const *in, void *user) {
    (void)user;
    return js_forward(ctx, in, forward_arity);
}

static nb_gradcheck_result last;

/* nb_gradcheck of Module.nbForward over in[0..n_in-1]: PyTorch's defaults,
 * or fast mode (n_dirs random directions) when fast. The result stays in
 * `last` for the accessors below. */
EMSCRIPTEN_KEEPALIVE int nb_wasm_gradcheck(nb_ctx *ctx, int n_in, nb_tensor *const *in, bool fast,
                                           double eps, double atol, double rtol) {
    nb_gradcheck_opts o = nb_gradcheck_defaults();
    o.fast = fast;
    if (eps > 0) o.eps = eps;
    if (atol >= 0) o.atol = atol;
    if (rtol >= 0) o.rtol = rtol;
    forward_arity = n_in;
    memset(&last, 0, sizeof last);
    return (int)nb_gradcheck(ctx, forward, NULL, n_in, in, &o, &last);
}

EMSCRIPTEN_KEEPALIVE bool nb_wasm_gc_passed(void) { return last.passed; }
EMSCRIPTEN_KEEPALIVE double nb_wasm_gc_max_abs_err(void) { return last.max_abs_err; }
EMSCRIPTEN_KEEPALIVE int nb_wasm_gc_worst_input(void) { return last.worst_input; }
EMSCRIPTEN_KEEPALIVE const char *nb_wasm_gc_message(void) { return last.message; }
EMSCRIPTEN_KEEPALIVE const char *nb_wasm_gc_blame_op(void) { return last.blame_op; }
EMSCRIPTEN_KEEPALIVE int nb_wasm_gc_blame_index(void) { return last.blame_index; }
