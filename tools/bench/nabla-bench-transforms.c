/* nabla-bench-transforms - the speed of forward mode and the transforms
 * against what they replace, on one thread, float32:
 *
 *   jvp_gpt  a JVP of the cpu-baby GPT's loss (nanoGPT layout, 4/4/128,
 *            vocab 65, batch 12 x 64) along a random tangent of every
 *            parameter (one dual forward, nb_make_dual) against the forward
 *            pass alone, both with recording off
 *   hvp_mha  a Hessian-vector product of the seeds' MultiHeadAttention's MSE
 *            loss (B 8, T 32, D 64, 4 heads) in its parameters: nb_hvp
 *            forward over reverse (NB_HVP_FWD_REV: v pushed along the
 *            forward and the recorded backward) against nb_hvp reverse over
 *            reverse (NB_HVP_REV_REV: the gradient of
 *            <nb_grad(loss, create_graph), v>); the line also says which
 *            NB_HVP_AUTO picks
 *   psg_mha  per-sample gradients (nb_per_sample_grads) of the same module
 *            at B 64 against one gradient of the batch's summed loss
 *
 * Each figure is the median of 5 rounds of at least 0.25 s, rounds of the
 * two sides interleaved. One line per row:
 *
 *   transforms row=NAME base_ms=X ms=Y ratio=Y/X
 *
 * tools/bench/bench_torch_transforms.py times functorch's jvp and
 * vmap(grad) on the same shapes; `make bench` runs both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla.h"
#include "now.h"

#define ROUNDS 5
#define ROUND_S 0.25

typedef double (*bench_fn)(void *state); /* runs once, returns a value to keep */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median ms per call of a and b, rounds interleaved after one warm-up. */
static void time_pair(bench_fn a, bench_fn b, void *state, double *ms_a, double *ms_b) {
    bench_fn fn[2] = {a, b};
    double med[2], r[2][ROUNDS], keep = 0;
    for (int k = 0; k < 2; k++) keep += fn[k](state);
    for (int round = 0; round < ROUNDS; round++)
        for (int k = 0; k < 2; k++) {
            int n = 0;
            double t0 = now_s(), t;
            do {
                keep += fn[k](state);
                n++;
            } while ((t = now_s() - t0) < ROUND_S);
            r[k][round] = t * 1e3 / n;
        }
    for (int k = 0; k < 2; k++) {
        qsort(r[k], ROUNDS, sizeof r[k][0], cmp_double);
        med[k] = r[k][ROUNDS / 2];
    }
    if (!isfinite(keep)) fprintf(stderr, "nabla-bench-transforms: a result is not finite\n");
    *ms_a = med[0], *ms_b = med[1];
}

/* diff: the largest relative difference between the two sides' results
 * (checked once before timing), or a negative number when not compared. */
static void report(const char *row, double base, double ms, double diff) {
    printf("transforms row=%s base_ms=%.3f ms=%.3f ratio=%.2f", row, base, ms, ms / base);
    if (diff >= 0) printf(" max_rel_diff=%.2g", diff);
    printf("\n");
    fflush(stdout);
}

/* max |a - b| / max |b| over the elements of the pairs a[j], b[j] */
static double rel_diff(int n, nb_tensor *const *a, nb_tensor *const *b) {
    double worst = 0, scale = 0;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; a[j] && b[j] && i < b[j]->numel; i++) {
            worst = fmax(worst, fabs(nb_get(a[j], i) - nb_get(b[j], i)));
            scale = fmax(scale, fabs(nb_get(b[j], i)));
        }
    return scale > 0 ? worst / scale : worst;
}

static int fail(nb_ctx *ctx, const char *what) {
    fprintf(stderr, "nabla-bench-transforms: %s: %s\n", what,
            nb_ctx_error(ctx) ? nb_ctx_error(ctx) : "failed");
    return 1;
}

/* ---- jvp_gpt ---------------------------------------------------------------- */
typedef struct gpt_state {
    nb_gpt m;
    nb_ctx *step, *jstep; /* the forward's and the JVP's, each arena sized to its own peak */
    nb_tensor *ids, *targets;
    nb_tensor *tangent[NB_LIST_MAX];
} gpt_state;

static double gpt_forward(void *p) {
    gpt_state *s = p;
    nb_ctx_reset(s->step);
    nb_set_grad_enabled(s->step, false);
    return nb_item(nb_gpt_loss(s->step, &s->m, s->ids, s->targets, NULL));
}

/* Each parameter's struct holds its dual for the call (a view of its own
 * data carrying the tangent), so the model reads duals where it reads its
 * parameters; the structs are put back afterwards. */
static double gpt_jvp(void *p) {
    gpt_state *s = p;
    nb_tensor saved[NB_LIST_MAX];
    int n = s->m.params.n;
    nb_ctx_reset(s->jstep);
    nb_set_grad_enabled(s->jstep, false);
    for (int j = 0; j < n; j++) {
        nb_tensor *w = nb_list_tensor(&s->m.params, j);
        nb_tensor *d = nb_make_dual(s->jstep, w, s->tangent[j]);
        saved[j] = *w;
        if (d) *w = *d;
    }
    nb_tensor *t = nb_tangent(nb_gpt_loss(s->jstep, &s->m, s->ids, s->targets, NULL));
    for (int j = 0; j < n; j++) *nb_list_tensor(&s->m.params, j) = saved[j];
    return nb_item(t);
}

static int bench_jvp_gpt(void) {
    static gpt_state s;
    nb_ctx *pctx = nb_ctx_new(0);
    s.step = nb_ctx_new(0);
    s.jstep = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1337, 1);
    nb_gpt_config c = nb_gpt_config_default(NB_GPT_NANOGPT);
    c.vocab_size = 65, c.block_size = 64, c.n_layer = 4, c.n_head = 4, c.n_embd = 128;
    c.dropout = 0, c.dtype = NB_F32, c.bias = false; /* bench-gpt's cpu-baby */
    if (nb_gpt_init(pctx, &s.m, &c, &rng)) return fail(pctx, "gpt_init");
    if (s.m.params.n > NB_LIST_MAX) return fail(pctx, "too many parameters");
    nb_gpt_train(&s.m, false);
    s.ids = nb_zeros(pctx, NB_I64, NB_SHAPE(12, 64));
    s.targets = nb_zeros(pctx, NB_I64, NB_SHAPE(12, 64));
    for (size_t i = 0; i < 12 * 64; i++) {
        nb_set(s.ids, i, nb_pcg32_next(&rng) % 65);
        nb_set(s.targets, i, nb_pcg32_next(&rng) % 65);
    }
    for (int j = 0; j < s.m.params.n; j++) {
        nb_tensor *w = nb_list_tensor(&s.m.params, j);
        s.tangent[j] = nb_normal(pctx, NB_F32, w->ndim, w->shape, 0, 1, &rng);
    }
    if (nb_ctx_error(pctx)) return fail(pctx, "setup");
    double base, ms;
    time_pair(gpt_forward, gpt_jvp, &s, &base, &ms);
    if (nb_ctx_error(s.jstep)) return fail(s.jstep, "jvp_gpt");
    report("jvp_gpt", base, ms, -1);
    nb_gpt_free(&s.m);
    nb_ctx_free(s.step);
    nb_ctx_free(s.jstep);
    nb_ctx_free(pctx);
    return 0;
}

/* ---- the seeds' MultiHeadAttention -------------------------------------------- */
#define MHA_NP 5 /* W_query, W_key, W_value, out_proj.weight, out_proj.bias */

typedef struct mha_state {
    nb_nn_mha m;
    nb_ctx *step;
    int64_t B, T, D;
    nb_tensor *x, *y;           /* (B, T, D) */
    nb_tensor *p[MHA_NP], *v[MHA_NP];
} mha_state;

/* The MSE loss of the module with in[0..4] as its parameters on x (n, T, D). */
static nb_tensor *mha_loss_on(nb_ctx *c, mha_state *s, nb_tensor *const *in, nb_tensor *x,
                              nb_tensor *y) {
    nb_nn_mha m = s->m;
    m.W_query.weight = in[0], m.W_key.weight = in[1], m.W_value.weight = in[2];
    m.out_proj.weight = in[3], m.out_proj.bias = in[4];
    return nb_mse_loss(c, nb_nn_mha_forward(c, &m, x), y);
}

/* One sample for nb_per_sample_grads: in = {params..., x (T, D), y (T, D)}. */
static nb_tensor *mha_sample_loss(nb_ctx *c, nb_tensor *const *in, void *user) {
    mha_state *s = user;
    nb_tensor *x = nb_reshape(c, in[MHA_NP], NB_SHAPE(1, s->T, s->D));
    nb_tensor *y = nb_reshape(c, in[MHA_NP + 1], NB_SHAPE(1, s->T, s->D));
    return mha_loss_on(c, s, in, x, y);
}

/* nb_hvp of the module's loss by `mode`; checks that it ran that way. */
static nb_status hvp_by(nb_ctx *c, mha_state *s, nb_hvp_mode mode, nb_tensor **hv) {
    nb_tensor *l = mha_loss_on(c, s, s->p, s->x, s->y);
    nb_status st = nb_hvp(c, l, MHA_NP, s->p, s->v, &(nb_grad_opts){.hvp_mode = mode}, hv);
    if (!st && mode != NB_HVP_AUTO && nb_hvp_last_method(c) != mode)
        return nb_ctx_fail(c, NB_ERR_STATE, "hvp_mha: nb_hvp took the other way");
    return st;
}

static double hvp_rev_rev(void *p) {
    mha_state *s = p;
    nb_ctx_reset(s->step);
    nb_tensor *hv[MHA_NP];
    return hvp_by(s->step, s, NB_HVP_REV_REV, hv) ? NAN : nb_get(hv[0], 0);
}

static double hvp_fwd_rev(void *p) {
    mha_state *s = p;
    nb_ctx_reset(s->step);
    nb_tensor *hv[MHA_NP];
    return hvp_by(s->step, s, NB_HVP_FWD_REV, hv) ? NAN : nb_get(hv[0], 0);
}

static double batch_grad(void *p) {
    mha_state *s = p;
    nb_ctx_reset(s->step);
    nb_tensor *g[MHA_NP];
    /* the summed per-sample losses: B times the batch's mean */
    nb_tensor *l = nb_scale(s->step, mha_loss_on(s->step, s, s->p, s->x, s->y), (double)s->B);
    if (nb_grad(s->step, 1, &l, NULL, MHA_NP, s->p, NULL, g)) return NAN;
    return nb_get(g[0], 0);
}

static double per_sample(void *p) {
    mha_state *s = p;
    nb_ctx_reset(s->step);
    nb_tensor *g[MHA_NP], *data[2] = {s->x, s->y};
    if (nb_per_sample_grads(s->step, mha_sample_loss, s, MHA_NP, s->p, 2, data, g)) return NAN;
    return nb_get(g[0], 0);
}

static int mha_setup(mha_state *s, nb_ctx *pctx, int64_t B) {
    s->step = nb_ctx_new(0);
    s->B = B, s->T = 32, s->D = 64;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 123, 4);
    if (nb_nn_mha_init(pctx, &s->m, s->D, s->D, s->T, 0.0, 4, false, NB_F32, &rng))
        return fail(pctx, "mha_init");
    s->x = nb_normal(pctx, NB_F32, NB_SHAPE(B, s->T, s->D), 0, 1, &rng);
    s->y = nb_normal(pctx, NB_F32, NB_SHAPE(B, s->T, s->D), 0, 1, &rng);
    for (int j = 0; j < MHA_NP; j++) {
        s->p[j] = nb_list_tensor(&s->m.params, j);
        s->v[j] = nb_normal(pctx, NB_F32, s->p[j]->ndim, s->p[j]->shape, 0, 1, &rng);
    }
    return nb_ctx_error(pctx) ? fail(pctx, "setup") : 0;
}

static int bench_mha(void) {
    static mha_state h, b;
    nb_ctx *pctx = nb_ctx_new(0);
    double base, ms;
    if (mha_setup(&h, pctx, 8)) return 1;
    /* both HVPs once, side by side */
    nb_ctx *c = nb_ctx_new(0);
    nb_tensor *hv[MHA_NP], *g[MHA_NP], *t[MHA_NP], *l;
    hvp_by(c, &h, NB_HVP_REV_REV, hv);
    hvp_by(c, &h, NB_HVP_FWD_REV, t);
    hvp_by(c, &h, NB_HVP_AUTO, g);
    const char *autos = nb_hvp_last_method(c) == NB_HVP_FWD_REV ? "fwd_rev" : "rev_rev";
    if (nb_ctx_error(c)) return fail(c, "hvp_mha check");
    double diff = rel_diff(MHA_NP, t, hv);
    time_pair(hvp_rev_rev, hvp_fwd_rev, &h, &base, &ms);
    if (nb_ctx_error(h.step)) return fail(h.step, "hvp_mha");
    report("hvp_mha", base, ms, diff);
    printf("hvp_mha NB_HVP_AUTO took %s\n", autos);
    if (mha_setup(&b, pctx, 64)) return 1;
    /* the per-sample gradients summed over the batch are the batch gradient */
    nb_ctx_reset(c);
    nb_tensor *data[2] = {b.x, b.y}, *sum[MHA_NP];
    nb_per_sample_grads(c, mha_sample_loss, &b, MHA_NP, b.p, 2, data, g);
    l = nb_scale(c, mha_loss_on(c, &b, b.p, b.x, b.y), (double)b.B);
    nb_grad(c, 1, &l, NULL, MHA_NP, b.p, NULL, hv);
    for (int j = 0; j < MHA_NP; j++) sum[j] = nb_sum_dim(c, g[j], 0, false);
    if (nb_ctx_error(c)) return fail(c, "psg_mha check");
    diff = rel_diff(MHA_NP, sum, hv);
    time_pair(batch_grad, per_sample, &b, &base, &ms);
    if (nb_ctx_error(b.step)) return fail(b.step, "psg_mha");
    report("psg_mha", base, ms, diff);
    nb_ctx_free(c);
    nb_list_free(&h.m.params), nb_list_free(&b.m.params);
    nb_ctx_free(h.step), nb_ctx_free(b.step);
    nb_ctx_free(pctx);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        puts("usage: nabla-bench-transforms [--help]\n"
             "  Times, on one thread in float32: a JVP through the cpu-baby GPT against its\n"
             "  forward (jvp_gpt), nb_hvp's forward-over-reverse HVP of MultiHeadAttention\n"
             "  against reverse over reverse (hvp_mha), and its per-sample gradients at\n"
             "  B 64 against one batch gradient (psg_mha). One line per row:\n"
             "    transforms row=NAME base_ms=X ms=Y ratio=Y/X\n"
             "  Writes no files.");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "nabla-bench-transforms: unexpected argument '%s' (see --help)\n",
                argv[1]);
        return 2;
    }
    nb_set_num_threads(1);
    int rc = bench_jvp_gpt();
    if (!rc) rc = bench_mha();
    nb_set_num_threads(1);
    return rc;
}
