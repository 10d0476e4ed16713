/* gradcheck/gradcheck_internal.h - what the gradient check (gradcheck.c),
 * its search for the op to blame (blame.c) and its result message
 * (message.c) share: the state of one check. */
#ifndef NB_GRADCHECK_INTERNAL_H
#define NB_GRADCHECK_INTERNAL_H

#include "tape/tape_internal.h"

/* One check of f: its inputs as float64 leaves, and the two contexts. */
typedef struct gc {
    nb_gradcheck_fn f;
    void *user;
    int n_in;        /* inputs, then listed parameters */
    int n_user;      /* how many of them are f's inputs (in[]) */
    const nb_tensor_list *params; /* the listed parameters, or NULL */
    nb_tensor *saved; /* each parameter's own struct while it is rebound */
    int n_bound;      /* how many parameters are rebound */
    nb_tensor **x;   /* float64 copies (leaves) of the inputs; rebound parameters */
    bool *check;     /* which inputs are differentiated */
    nb_ctx *leaves;  /* owns x */
    nb_ctx *work;    /* reset for every evaluation */
    nb_gradcheck_result *res;
    double **worst_u; /* fast mode: the worst direction's u per input (NULL: not moved) */
    double *worst_v;  /* ... and its v, one per output element */
} gc;

/* Evaluates f on the current x, on g->work reset first, with gradients
 * recorded or not; returns the output, or NULL when f failed or returned
 * something other than f64 (the error is on g->work). */
NB_HIDDEN nb_tensor *nb_gc_eval(gc *g, bool with_grad);

/* blame.c: fills res->blame_* with the op whose backward disagrees with
 * finite differences (and sets *y_untracked when the output is not on the
 * tape). `failed`: the check failed, so its worst direction is replayed
 * first. The inputs are left as they were. */
NB_HIDDEN nb_status nb_gc_blame(gc *g, const nb_gradcheck_opts *o, bool failed,
                                bool *y_untracked);

/* forward_check.c: check_forward_ad, after the reverse check: fills the
 * forward_* fields of res (and its worst entry when only forward mode
 * failed); a status other than NB_OK when f failed (the error on g->work),
 * changed size (NB_ERR_STATE) or memory ran out. */
NB_HIDDEN nb_status nb_gc_forward(gc *g, const nb_gradcheck_opts *o);

/* message.c: res->message from the finished check and blame (bst is the
 * blame search's status). */
NB_HIDDEN void nb_gc_write_message(const gc *g, const nb_gradcheck_opts *o, bool y_untracked,
                                   nb_status bst);

/* The frame of the public checks: a NULL context, or one already in error,
 * runs nothing (res says which); otherwise `all` runs the check and a
 * failure's message goes on ctx too. who names the check in messages. */
typedef nb_status (*nb_gc_all_fn)(nb_gradcheck_fn f, void *user, const nb_tensor_list *params,
                                  int n_in, nb_tensor *const *in,
                                  const nb_gradcheck_opts *opts, nb_gradcheck_result *res);
NB_HIDDEN nb_status nb_gc_on_ctx(nb_ctx *ctx, const char *who, nb_gc_all_fn all,
                                 nb_gradcheck_fn f, void *user, const nb_tensor_list *params,
                                 int n_in, nb_tensor *const *in, const nb_gradcheck_opts *opts,
                                 nb_gradcheck_result *res);
#endif
