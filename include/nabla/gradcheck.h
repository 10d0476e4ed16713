/* nabla/gradcheck.h - float64 finite-difference gradient checks with
 * PyTorch's semantics (torch.autograd.gradcheck). */
#ifndef NABLA_GRADCHECK_H
#define NABLA_GRADCHECK_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The function under test: builds its output from `in` on `ctx` with nabla
 * ops. Called many times, on fresh F64 copies of the inputs. Must be
 * deterministic (re-seed any rng inside from `user`). */
typedef nb_tensor *(*nb_gradcheck_fn)(nb_ctx *ctx, nb_tensor *const *in, void *user);

typedef struct nb_gradcheck_opts {
    double eps;  /* finite-difference step (PyTorch: 1e-6) */
    double atol; /* absolute tolerance (1e-5) */
    double rtol; /* relative tolerance (1e-3) */
    bool fast;   /* check v^T J u along random u, v instead of the full J */
    int n_dirs;  /* fast mode: how many (u, v) pairs (default 4) */
    uint64_t seed; /* fast mode: directions come from PCG32 with this seed */
} nb_gradcheck_opts;

/* PyTorch's defaults: eps 1e-6, atol 1e-5, rtol 1e-3, full Jacobian. */
nb_gradcheck_opts nb_gradcheck_defaults(void);

typedef struct nb_gradcheck_result {
    bool passed;
    double max_abs_err;  /* worst |analytic - numeric| over all checked entries */
    int worst_input;     /* which input holds the worst entry (-1 if none) */
    size_t worst_index;  /* flat index into that input (fast mode: direction) */
    size_t worst_output; /* flat index into the output (full mode) */
    double analytic;     /* the worst entry's analytic value ... */
    double numeric;      /* ... and its finite-difference value */
    char message[512];   /* a sentence naming the op, the entry and both values */
} nb_gradcheck_result;

/* Checks d f(in) / d in[i] for every input that requires grad: analytic
 * (from nb_backward) against central differences (f(x+eps) - f(x-eps))/2eps,
 * element by element; passes when every |a - n| <= atol + rtol * |n|.
 * Inputs may be F32 or F64: the check itself runs in F64. opts may be NULL
 * (defaults). res may be NULL. Returns NB_OK when it passed, NB_ERR_VALUE
 * when it did not, another status when f failed (message in res). */
nb_status nb_gradcheck(nb_gradcheck_fn f, void *user, int n_in, nb_tensor *const *in,
                       const nb_gradcheck_opts *opts, nb_gradcheck_result *res);

#ifdef __cplusplus
}
#endif
#endif
