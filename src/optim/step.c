/* optim/step.c - nanoGPT's learning-rate schedule and the one training step
 * every driver shares: zero grads, k micro-batches with loss / k, an
 * optional gradient-sync hook, clipping, lr, optimizer step. */
#include "optim/optim_internal.h"

/* The warmup's rate at iteration it < warmup_iters. */
static double warmup(const nb_lr_schedule *s, int64_t it) {
    return s->learning_rate * ((double)it + 1) / ((double)s->warmup_iters + 1);
}

/* The cosine from learning_rate (r = 0) to min_lr (r = 1). */
static double cosine(const nb_lr_schedule *s, double r) {
    double coeff = 0.5 * (1.0 + cos(3.14159265358979323846 * r));
    return s->min_lr + coeff * (s->learning_rate - s->min_lr);
}

double nb_lr_at(const nb_lr_schedule *s, int64_t it) {
    if (!s || it < 0) return NAN;
    if (!s->decay_lr) return s->learning_rate;
    /* The sums and differences in double: exact below 2^53, and no int64
     * overflow at the limits (warmup_iters INT64_MAX, a negative warmup
     * with lr_decay_iters INT64_MAX). */
    double w = (double)s->warmup_iters;
    if (it < s->warmup_iters) return warmup(s, it);
    if (it > s->lr_decay_iters) return s->min_lr;
    if (s->lr_decay_iters == s->warmup_iters) return s->min_lr;
    return cosine(s, ((double)it - w) / ((double)s->lr_decay_iters - w));
}

double nb_lr_at_fraction(const nb_lr_schedule *s, int64_t it, double frac) {
    if (!s || it < 0 || isnan(frac)) return NAN;
    if (!s->decay_lr) return s->learning_rate;
    if (it < s->warmup_iters) return warmup(s, it);
    return frac >= 1 ? s->min_lr : cosine(s, frac > 0 ? frac : 0);
}

/* zero_grad, deferred: each gradient is marked stale rather than cleared,
 * and the first backward rule to reach it stores its product there rather
 * than adding it (nb_grad_buffer_fresh; a rule that only adds clears it
 * first). So a gradient is not written twice and read once before its
 * first product: for a mixture of experts' weight gradients, megabytes
 * that come from memory each step. A gradient no rule reached is cleared
 * after the backward passes, so what the step's caller sees is the same. */
static void mark_stale(const nb_tensor_list *params) {
    for (int i = 0; i < params->n; i++) {
        nb_tensor *t = nb_list_tensor(params, i);
        if (t && t->grad) t->grad_stale = true;
    }
}

static void clear_stale(const nb_tensor_list *params) {
    for (int i = 0; i < params->n; i++) {
        nb_tensor *t = nb_list_tensor(params, i);
        if (t && t->grad_stale) nb_zero_grad(t);
    }
}

/* The k micro-batches' forward and backward passes, their losses summed. */
static nb_status micro_batches(nb_ctx *ctx, const nb_train_step *s, double *sum) {
    const char *fn = "train_step";
    for (int k = 0; k < s->accum_steps; k++) {
        nb_ctx_reset(ctx);
        nb_tensor *loss = s->loss_fn(ctx, k, s->user);
        if (!loss || nb_ctx_status(ctx))
            return nb_ctx_status(ctx) ? nb_ctx_status(ctx)
                                      : nb_ctx_fail(ctx, NB_ERR_STATE, "%s: loss_fn returned "
                                                    "NULL for micro-batch %d", fn, k);
        *sum += nb_item(loss);
        nb_tensor *scaled = s->accum_steps > 1 ? nb_scale(ctx, loss, 1.0 / s->accum_steps) : loss;
        /* intermediate gradients are not kept: their buffers are reused */
        bool recycle = ctx->recycle_grads;
        ctx->recycle_grads = true;
        nb_status st = nb_backward(ctx, scaled, NULL);
        ctx->recycle_grads = recycle;
        if (st) return st;
    }
    return NB_OK;
}

nb_status nb_train_step_run(nb_ctx *ctx, const nb_train_step *s, nb_step_result *out) {
    const char *fn = "train_step";
    if (!ctx) return NB_ERR_NULL;
    if (out) *out = (nb_step_result){NAN, NAN};
    if (!s || !s->opt || !s->params || !s->loss_fn)
        return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: %s is NULL", fn,
                           !s ? "step" : !s->opt ? "opt" : !s->params ? "params" : "loss_fn");
    if (s->accum_steps < 1)
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: accum_steps %d must be >= 1", fn,
                           s->accum_steps);
    if (!(s->lr >= 0)) return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: lr %g must be >= 0", fn, s->lr);
    if (!nb_list_valid(s->params))
        return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: the params list is corrupt", fn);
    mark_stale(s->params); /* zero_grad */
    double sum = 0;
    nb_status st = micro_batches(ctx, s, &sum);
    clear_stale(s->params);
    if (st) return st;
    if (s->grad_sync) {
        st = s->grad_sync(s->params, s->sync_user);
        if (st) return nb_ctx_fail(ctx, st, "%s: grad_sync failed (%s)", fn, nb_status_str(st));
    }
    /* clip_grad_norm_: the norm, then g *= coef when clipping, done by the
     * optimizer as it reads each gradient when it can (the same products;
     * for GPT-2 124M one pass over 0.5 GB fewer), else here */
    double norm = nb_grad_norm(s->params);
    double coef = s->grad_clip > 0 ? s->grad_clip / (norm + 1e-6) : 1.0;
    bool fused = coef < 1.0 && nb_optim_fuses_scale(s->opt, s->params);
    if (coef < 1.0 && !fused) nb_grad_scale(s->params, coef);
    nb_optim_set_lr(s->opt, s->lr); /* lr >= 0 was checked above: cannot fail */
    if (fused) s->opt->grad_scale = coef;
    st = nb_optim_step_on(ctx, s->opt); /* its error goes on ctx */
    s->opt->grad_scale = 1.0;
    if (st) return st;
    if (out) *out = (nb_step_result){sum / s->accum_steps, norm};
    return NB_OK;
}
