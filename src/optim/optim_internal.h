/* optim/optim_internal.h - the optimizer record, shared by the optimizers
 * (optim.c), the training step (step.c), clipping (clip.c) and the
 * optimizer's checkpoint state (io/optim_state.c). */
#ifndef NB_OPTIM_INTERNAL_H
#define NB_OPTIM_INTERNAL_H

#include "core/core_internal.h"

/* Does the optimizer update exactly these tensors under these names
 * (optim/optim.c, for checkpoints)? why[] names the first difference. */
NB_HIDDEN bool nb_optim_matches(const nb_optim *o, const nb_tensor_list *params, char *why,
                                size_t n);


/* fn(t, lo, hi, arg) over ranges of the elements of every float gradient in
 * the list (entries without one skipped), split over the pool's threads;
 * each range lies within one tensor. For elementwise work only: which
 * thread takes which range varies. In optim/clip.c, beside clipping. */
typedef void (*nb_grad_range_fn)(nb_tensor *t, size_t lo, size_t hi, void *arg);
/* Flat indices [lo, hi) over n pieces laid end to end, piece k ending at
 * ends[k]: fn(arg, k, a, b) for each piece met, a and b counted from the
 * piece's start (a parallel range over several tensors' elements). */
typedef void (*nb_piece_fn)(void *arg, int k, int64_t a, int64_t b);
NB_HIDDEN void nb_pieces_range(const int64_t *ends, int n, int64_t lo, int64_t hi,
                               nb_piece_fn fn, void *arg);
NB_HIDDEN void nb_grad_ranges(const nb_tensor_list *l, nb_grad_range_fn fn, void *arg);

typedef enum opt_kind { OPT_SGD, OPT_ADAM, OPT_ADAMW, OPT_MUON } opt_kind;

/* One parameter's state. Tensors have the parameter's shape and dtype. */
typedef struct param_state {
    nb_tensor *momentum_buffer; /* SGD with momentum */
    nb_tensor *exp_avg;         /* Adam: m */
    nb_tensor *exp_avg_sq;      /* Adam: v */
    nb_tensor *max_exp_avg_sq;  /* Adam with amsgrad: v_max */
    int64_t step;               /* Adam: this parameter's t */
    bool live; /* the state exists (PyTorch: the param has an entry in optimizer.state) */
} param_state;

struct nb_optim {
    opt_kind kind;
    nb_sgd_opts sgd;       /* used when kind == OPT_SGD */
    nb_adam_opts adam;     /* used for OPT_ADAM and OPT_ADAMW, and by OPT_MUON's
                              AdamW parameters */
    nb_muon_opts muon;     /* OPT_MUON */
    bool *aux_adam;        /* OPT_MUON: params.n flags, true for a parameter AdamW
                              updates (nb_muon_adamw_new), or NULL: all Muon */
    double muon_per_lr;    /* nb_muon_adamw_new: muon.lr / adam.lr, kept by set_lr */
    void *ns_work;         /* OPT_MUON: Newton-Schulz scratch (malloc), freed with o:
                              ns_parts slots of ns_bytes, one a thread at work */
    size_t ns_bytes;
    int ns_parts;
    nb_tensor_list params; /* copied from the caller */
    param_state *st;       /* params.n records */
    int64_t steps;         /* nb_optim_step calls */
    bool *no_decay;        /* params.n flags (nb_adamw_new_groups) or NULL: weight_decay 0 */
    double *lr_scale;      /* params.n multipliers of the lr (nb_optim_set_lr_scale), or
                              NULL: all 1 */
    nb_ctx *ctx;           /* owns all of the above */
    double grad_scale;     /* set by the training step for one step: its gradient clip,
                              applied by the Adam update as it reads each gradient
                              (nb_optim_fuses_scale); 1 otherwise */
    nb_ctx *err_ctx;       /* the caller's context, given at creation: records every
                              error of a call that has no context argument (step,
                              set_lr, load_state); it outlives the optimizer */
};

NB_HIDDEN extern const char *const nb_optim_kind_names[];

/* Parameter i's multiplier of the lr (1 unless nb_optim_set_lr_scale). */
static inline double nb_optim_lr_scale(const nb_optim *o, int i) {
    return o->lr_scale ? o->lr_scale[i] : 1.0;
}
static inline const char *nb_optim_kname(const nb_optim *o) { return nb_optim_kind_names[o->kind]; }

/* nb_optim_step and nb_optim_load_state with their errors recorded on
 * `err` instead of o->err_ctx: the training step (step.c) and checkpoint
 * loading (io/checkpoint.c) report on their own context. */
NB_HIDDEN nb_status nb_optim_step_on(nb_ctx *err, nb_optim *o);
/* Whether o's step can multiply the gradients of `clipped` by o->grad_scale
 * as it reads them: Adam or AdamW without amsgrad or maximize, float32
 * parameters, and `clipped` is exactly o's list (else a gradient outside it
 * would miss the clip). The same products as clipping first, one pass over
 * the gradients fewer. */
NB_HIDDEN bool nb_optim_fuses_scale(const nb_optim *o, const nb_tensor_list *clipped);
/* The L2 norm of the list's gradients (clip.c), the same bits on any number
 * of threads; NAN when out of memory. */
NB_HIDDEN double nb_grad_norm(const nb_tensor_list *params);
/* g *= coef for every gradient of the list, on every thread. */
NB_HIDDEN void nb_grad_scale(const nb_tensor_list *params, double coef);
NB_HIDDEN nb_status nb_optim_load_state_on(nb_ctx *err, nb_optim *o, const nb_tensor_list *state);
/* The same with each state tensor put in place by copy(user, dst, src) (a
 * checkpoint load reads them straight from the file); a copy's error stops
 * it (after the checks, so only a file that changed under the load). */
NB_HIDDEN nb_status nb_optim_load_state_with(nb_ctx *err, nb_optim *o, const nb_tensor_list *state,
                                             nb_status (*copy)(void *user, void *dst,
                                                               const nb_tensor *src),
                                             void *user);
/* nb_optim_state with views of the moments instead of copies (io/optim_state.c):
 * what a checkpoint save writes straight from, so saving adds no second copy
 * of a 124M model's 1 GB of AdamW state. Valid until the next step. */
NB_HIDDEN nb_status nb_optim_state_views(nb_ctx *ctx, nb_optim *o, nb_tensor_list *out);
/* Name of parameter i for messages and state keys: its list name, or its
 * index (written into buf) when it has none. */
NB_HIDDEN const char *nb_optim_param_name(const nb_tensor_list *l, int i, char *buf, size_t n);

/* Longest parameter name: "state.<name>.max_exp_avg_sq" must fit a key. */
#define NAME_MAX_LEN 400
#define KEY_MAX 512

/* ---- state records ------------------------------------------------------ */
/* Which state tensors this optimizer keeps per parameter. */
enum { S_MOMENTUM, S_EXP_AVG, S_EXP_AVG_SQ, S_MAX_EXP_AVG_SQ, S_COUNT };
NB_HIDDEN extern const char *const nb_optim_slot_names[S_COUNT];

/* Is parameter i one Muon updates (OPT_MUON, not in its AdamW group)? */
static inline bool nb_optim_is_muon(const nb_optim *o, int i) {
    return o->kind == OPT_MUON && !(o->aux_adam && o->aux_adam[i]);
}

/* Which state tensors parameter i keeps. */
static inline bool nb_optim_uses_slot(const nb_optim *o, int i, int s) {
    if (o->kind == OPT_SGD) return s == S_MOMENTUM && o->sgd.momentum != 0;
    if (nb_optim_is_muon(o, i)) return s == S_MOMENTUM;
    if (s == S_MAX_EXP_AVG_SQ) return o->adam.amsgrad;
    return s == S_EXP_AVG || s == S_EXP_AVG_SQ;
}

/* Does parameter i keep a step count (Adam and AdamW)? */
static inline bool nb_optim_has_step(const nb_optim *o, int i) {
    return o->kind != OPT_SGD && !nb_optim_is_muon(o, i);
}

/* Does parameter i keep any state at all? (SGD without momentum keeps none.) */
static inline bool nb_optim_keeps_state(const nb_optim *o, int i) {
    for (int s = 0; s < S_COUNT; s++)
        if (nb_optim_uses_slot(o, i, s)) return true;
    return nb_optim_has_step(o, i);
}

static inline nb_tensor **nb_optim_slot(param_state *ps, int s) {
    switch (s) {
    case S_MOMENTUM: return &ps->momentum_buffer;
    case S_EXP_AVG: return &ps->exp_avg;
    case S_EXP_AVG_SQ: return &ps->exp_avg_sq;
    default: return &ps->max_exp_avg_sq;
    }
}

/* Makes sure parameter i's state tensors exist (their values are set by the
 * caller). They are allocated once and reused after a load_state. Running
 * out of memory is recorded on err. */
NB_HIDDEN bool nb_optim_alloc_state(nb_ctx *err, nb_optim *o, int i);

/* For the constructors of muon.c (in optim.c): the checks every optimizer
 * makes of its parameter list, and a new optimizer of `kind` with room for
 * `slots` state tensors a parameter (its options still to be set). */
NB_HIDDEN nb_status nb_optim_check_params(nb_ctx *err, const char *name,
                                          const nb_tensor_list *l);
NB_HIDDEN nb_status nb_optim_check_adam_opts(nb_ctx *err, const char *name,
                                             const nb_adam_opts *o);
NB_HIDDEN nb_optim *nb_optim_new_kind(nb_ctx *err, opt_kind kind, const nb_tensor_list *params,
                                      int slots);
/* The Muon updates of parameters idx[0..n-1] (muon.c); a parameter whose
 * state is not live yet gets a zero momentum buffer first. */
NB_HIDDEN void nb_muon_update(nb_optim *o, const int *idx, int n);

#endif
