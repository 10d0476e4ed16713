/* parity.h - replaying the PyTorch fixtures of tests/fixtures/parity (written
 * by tools/ref/gen_fixtures.py) in nabla and measuring the difference. Shared by
 * the Check suite tests/check_parity.c and the tool tools/test/nabla-parity.c so
 * the per-op dispatch exists once. Internal: not installed, not in the
 * library: it is built into the tool and the test only.
 *
 * The error measure. A case's reference tensors form two columns: the
 * outputs ("out", "out.<x>"; a trajectory's per-step "losses") and the
 * gradients ("grad.<k>", "grad.param.<name>"; a trajectory's final
 * parameters). For a tensor `got` against PyTorch's `want` in column c,
 *
 *     err = max_i |got_i - want_i| / S_c,   S_c = max |w| over every element w
 *                                                  of every tensor of column c
 *
 * so a column's largest err is the normwise (max-norm) relative error of
 * everything in it taken as one vector: of the whole gradient, with respect
 * to all inputs and parameters at once. Normwise, because elementwise
 * relative error is meaningless where the exact value is 0: the gradient of
 * an attention layer's key bias is exactly zero in exact arithmetic
 * (q . b_k adds the same constant to every score in a query's row, which
 * softmax ignores), and both libraries return rounding noise for it
 * (~1e-16 in f64, ~1e-7 in f32). S_c is 1 when
 * the column is all zeros. Non-finite reference values (the -inf that
 * masked_fill writes) must be matched exactly; any other NaN or inf in `got`
 * is an infinite error. I64 results (max's indices) must match exactly. A
 * case passes when every compared tensor has err <= tol:
 *
 *     ops and modules   f64 1e-10   f32 1e-5    (outputs and gradients)
 *     trajectories      f64 1e-9    f32 1e-3    (per-step losses, final weights) */
#ifndef NB_PARITY_H
#define NB_PARITY_H

#include "nabla.h"

#define NB_PARITY_NAME 128 /* longest fixture file name, with its terminator */
#define NB_PARITY_MSG 768

typedef struct nb_parity_result {
    char kind[16];     /* "op", "module" or "trajectory" */
    char what[64];     /* the op ("matmul"), module class or optimizer ("adam") */
    char label[64];    /* the case ("matmul_batched") */
    nb_dtype dtype;    /* of the fixture and of nabla's computation */
    double tol;        /* for every tensor of the case */
    /* Largest err over the outputs (trajectories: the per-step losses) and
     * over the gradients (trajectories: the final parameters), and the
     * tensor where it occurred. */
    double err_out, err_grad;
    char worst_out[64], worst_grad[64];
    int n_out, n_grad; /* tensors compared in each group */
    bool passed;
    /* Why it failed: the file, the tensor, the worst element (index, got,
     * want) and the tolerance; or what was wrong with the fixture or which
     * nabla call failed. Empty when passed. */
    char message[NB_PARITY_MSG];
} nb_parity_result;

/* The names of the "*.safetensors" files in dir, sorted, into
 * names[0..max-1]. Returns how many there are (which may exceed max: only
 * max are stored), or -1 when dir cannot be read. */
int nb_parity_list(const char *dir, char (*names)[NB_PARITY_NAME], int max);

/* Loads the fixture at path, runs the op, module or training run it
 * describes in nabla, compares, and fills *r. Returns r->passed. Never
 * crashes on a bad file: that is a failure with a message. */
bool nb_parity_run(const char *path, nb_parity_result *r);

#endif
