/* nabla-bench - speed figures for the hot ops, one case per line.
 *
 *   nabla-bench            every case
 *   nabla-bench matmul     only the cases whose name contains "matmul"
 *
 * Each case times its forward alone and forward+backward (the output's
 * gradient seeded with ones) on a step context reset every repetition, as a
 * training loop does, and prints microseconds per call and GFLOP/s. The
 * repetition count is calibrated so each figure takes about 0.15 s.
 *
 * Adding a case: a row in `cases` (name, forward function, input shapes,
 * dtype, flop counts); a new op needs only a forward function below.
 *
 * The last case, "demo step", times whole training steps of the model that
 * `make demo-reverse` trains (examples/demo_reverse.c: token and position
 * embeddings, causal MultiHeadAttention with dropout and a residual,
 * LayerNorm, a Linear head, cross-entropy, AdamW), built here from the
 * public API alone, and prints the median microseconds per step of five
 * rounds.
 *
 * The elementwise lines time the SIMD loops on 16M-element float tensors
 * (64 MB each, beyond the caches) and print GB/s counted from the bytes each
 * must read and write, beside a memcpy of 64 MB (read + write) as the
 * machine's bandwidth: "x copy" is how many times slower than that copy a
 * kernel moves its bytes (the target is at most 2). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "nabla.h"
#include "now.h"
#include "reverse_model.h" /* examples/: the demo's model */

#define BENCH_MAX_IN 4
#define BENCH_SECONDS 0.15

typedef nb_tensor *(*bench_fn)(nb_ctx *step, nb_tensor *const *in);

/* Forward flops of one call, from the inputs and the output. */
typedef double (*bench_flops_fn)(nb_tensor *const *in, const nb_tensor *out);

typedef struct bench_case {
    const char *name;
    bench_fn forward;
    bench_flops_fn flops;
    double backward_factor; /* backward flops = factor * forward flops */
    nb_dtype dtype;
    int n_in;
    int ndim[BENCH_MAX_IN];
    int64_t shape[BENCH_MAX_IN][NB_MAX_DIMS];
} bench_case;

/* ---- forward functions and their flop counts ------------------------------ */

static nb_tensor *fwd_matmul(nb_ctx *step, nb_tensor *const *in) {
    return nb_matmul(step, in[0], in[1]);
}

/* 2 * n * k * m per batch entry: every output element is a length-k dot. */
static double flops_matmul(nb_tensor *const *in, const nb_tensor *out) {
    return 2.0 * (double)out->numel * (double)in[0]->shape[in[0]->ndim - 1];
}

static nb_tensor *fwd_linear(nb_ctx *step, nb_tensor *const *in) {
    return nb_linear(step, in[0], in[1], in[2]);
}

/* 2 * rows * in_features * out_features; the bias adds are not counted. */
static double flops_linear(nb_tensor *const *in, const nb_tensor *out) {
    return 2.0 * (double)out->numel * (double)in[1]->shape[1];
}

/* ---- the cases ----------------------------------------------------------------- */

static const bench_case cases[] = {
    {"matmul 2d", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {2, 2}, {{64, 32}, {32, 32}}},
    {"matmul heads", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {4, 4}, {{8, 4, 16, 8}, {8, 4, 8, 16}}},
    {"matmul scores", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {4, 4}, {{8, 4, 64, 16}, {8, 4, 16, 64}}},
    {"matmul attn-v", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {4, 4}, {{8, 4, 64, 64}, {8, 4, 64, 8}}},
    {"matmul proj", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {3, 2}, {{8, 64, 32}, {32, 96}}},
    {"matmul odd", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {2, 2}, {{37, 53}, {53, 29}}},
    {"matmul 256", fwd_matmul, flops_matmul, 2.0, NB_F32, 2,
     {2, 2}, {{256, 256}, {256, 256}}},
    {"matmul 256 f64", fwd_matmul, flops_matmul, 2.0, NB_F64, 2,
     {2, 2}, {{256, 256}, {256, 256}}},
    /* the demo's layers: 512 rows (batch 32 x 16 positions), d_model 32 */
    {"linear 32->32", fwd_linear, flops_linear, 2.0, NB_F32, 3,
     {3, 2, 1}, {{32, 16, 32}, {32, 32}, {32}}},
    {"linear 32->11", fwd_linear, flops_linear, 2.0, NB_F32, 3,
     {3, 2, 1}, {{32, 16, 32}, {11, 32}, {11}}},
    {"linear 32->32 f64", fwd_linear, flops_linear, 2.0, NB_F64, 3,
     {3, 2, 1}, {{32, 16, 32}, {32, 32}, {32}}},
};

/* ---- timing ------------------------------------------------------------------------ */

/* Runs `reps` steps; returns the seconds taken, or -1 on an error. With
 * `seed` (ones of the output's shape, made once) each step also runs the
 * backward. */
static double run(const bench_case *c, nb_ctx *step, nb_tensor *const *in,
                  const nb_tensor *seed, long reps) {
    double t0 = now_s();
    for (long r = 0; r < reps; r++) {
        nb_ctx_reset(step);
        nb_tensor *out = c->forward(step, in);
        if (!out) return -1;
        if (seed && nb_backward(step, out, seed) != NB_OK) return -1;
    }
    return now_s() - t0;
}

/* Seconds per call, with the repetitions grown until they fill BENCH_SECONDS. */
static double time_per_call(const bench_case *c, nb_ctx *step, nb_tensor *const *in,
                            const nb_tensor *seed) {
    long reps = 1;
    double t = run(c, step, in, seed, reps); /* warm-up: grows the arena */
    while (t >= 0 && t < BENCH_SECONDS / 8) {
        reps *= 2;
        t = run(c, step, in, seed, reps);
    }
    if (t < 0) return -1;
    long want = (long)(BENCH_SECONDS / t * (double)reps) + 1;
    if (want > reps) {
        reps = want;
        t = run(c, step, in, seed, reps);
    }
    return t < 0 ? -1 : t / (double)reps;
}

static void shapes_str(const bench_case *c, nb_tensor *const *in, char *buf, size_t n) {
    size_t k = 0;
    buf[0] = '\0';
    for (int i = 0; i < c->n_in && k < n; i++) {
        char s[64];
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? " @ " : "",
                              nb_shape_str(in[i], s, sizeof s));
    }
}

static int bench_one(const bench_case *c) {
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 42, 1);
    nb_tensor *in[BENCH_MAX_IN];
    for (int i = 0; i < c->n_in; i++)
        in[i] = nb_requires_grad(
            nb_uniform(params, c->dtype, c->ndim[i], c->shape[i], -1.0, 1.0, &rng));
    int status = 0;
    double fwd = -1, both = -1, flops = 0;
    nb_tensor *out = nb_ctx_error(params) ? NULL : c->forward(step, in);
    if (out) {
        flops = c->flops(in, out);
        nb_tensor *seed = nb_ones(params, out->dtype, out->ndim, out->shape);
        fwd = time_per_call(c, step, in, NULL);
        both = seed ? time_per_call(c, step, in, seed) : -1;
    }
    if (fwd < 0 || both < 0) {
        const char *e = nb_ctx_error(params) ? nb_ctx_error(params) : nb_ctx_error(step);
        fprintf(stderr, "nabla-bench: %s: %s\n", c->name, e ? e : "failed");
        status = 1;
    } else {
        char s[128];
        shapes_str(c, in, s, sizeof s);
        double total = flops * (1.0 + c->backward_factor);
        printf("%-16s %-4s %-34s %10.2f %8.2f %12.2f %8.2f\n", c->name,
               nb_dtype_name(c->dtype), s, fwd * 1e6, flops / fwd * 1e-9, both * 1e6,
               total / both * 1e-9);
    }
    nb_ctx_free(step);
    nb_ctx_free(params);
    return status;
}

/* ---- elementwise kernels against memory bandwidth ------------------------- */

#define EW_N ((int64_t)1 << 24)

typedef struct ew_state {
    nb_ctx *params, *step;
    nb_tensor *x, *seed;
    nb_pcg32 rng;
    nb_optim *opt;
    nb_tensor_list list;
    void *src, *dst; /* the memcpy reference */
} ew_state;

typedef int (*ew_fn)(ew_state *s);

static int ew_copy(ew_state *s) {
    memcpy(s->dst, s->src, (size_t)EW_N * sizeof(float));
    return 0;
}

static int ew_exp(ew_state *s) {
    nb_ctx_reset(s->step);
    return nb_exp(s->step, s->x) ? 0 : 1;
}

static int ew_softmax(ew_state *s) {
    nb_ctx_reset(s->step);
    return nb_softmax(s->step, nb_reshape(s->step, s->x, NB_SHAPE(EW_N / 256, 256))) ? 0 : 1;
}

/* forward, then backward from `seed` (y, dy, dx read; dx written) */
static int ew_softmax_both(ew_state *s) {
    nb_ctx_reset(s->step);
    nb_tensor *y = nb_softmax(s->step, s->x);
    return y && nb_backward(s->step, y, s->seed) == NB_OK ? 0 : 1;
}

static int ew_dropout(ew_state *s) {
    nb_ctx_reset(s->step);
    return nb_dropout(s->step, s->x, 0.1, true, &s->rng) ? 0 : 1;
}

static int ew_adam(ew_state *s) { return nb_optim_step(s->opt) == NB_OK ? 0 : 1; }

/* Seconds per call: the median of five rounds of about 0.1 s. */
static double ew_time(ew_fn fn, ew_state *s) {
    double r[5];
    if (fn(s)) return -1; /* warm-up */
    for (int k = 0; k < 5; k++) {
        long reps = 0;
        double t0 = now_s(), t;
        do {
            if (fn(s)) return -1;
            reps++;
            t = now_s();
        } while (t - t0 < 0.1);
        r[k] = (t - t0) / (double)reps;
        for (int j = k; j > 0 && r[j] < r[j - 1]; j--) {
            double tmp = r[j];
            r[j] = r[j - 1];
            r[j - 1] = tmp;
        }
    }
    return r[2];
}

static int bench_elementwise(void) {
    static const struct {
        const char *name, *what;
        ew_fn fn;
        double bytes; /* per element */
    } cases[] = {
        {"copy", "memcpy 64 MB (the yardstick)", ew_copy, 8},
        {"exp", "y = exp(x)", ew_exp, 8},
        {"softmax", "rows of 256, forward", ew_softmax, 8},
        {"softmax f+b", "rows of 256, forward + backward", ew_softmax_both, 24},
        {"dropout", "p 0.1: y and the byte mask", ew_dropout, 9},
        {"adam", "p, m, v updated from g", ew_adam, 28},
    };
    ew_state s = {nb_ctx_new(0), nb_ctx_new(0), NULL, NULL, {0, 0}, NULL, {0}, NULL, NULL};
    nb_pcg32_seed(&s.rng, 42, 7);
    int status = 1;
    if (s.params && s.step) {
        s.x = nb_requires_grad(
            nb_uniform(s.params, NB_F32, NB_SHAPE(EW_N / 256, 256), -4, 4, &s.rng));
        s.seed = nb_uniform(s.params, NB_F32, NB_SHAPE(EW_N / 256, 256), -1, 1, &s.rng);
        s.src = malloc((size_t)EW_N * sizeof(float));
        s.dst = malloc((size_t)EW_N * sizeof(float));
        if (s.x && s.seed && s.src && s.dst) {
            memset(s.src, 1, (size_t)EW_N * sizeof(float));
            memset(s.dst, 0, (size_t)EW_N * sizeof(float));
            memcpy(s.x->grad, s.seed->data, (size_t)EW_N * sizeof(float));
            s.list.n = 1;
            s.list.names[0] = "x";
            s.list.t[0] = s.x;
            s.opt = nb_adam_new(s.params, &s.list, nb_adam_defaults(1e-3));
        }
    }
    if (s.opt) {
        status = 0;
        double copy_gbs = 0;
        printf("\n%-16s %-4s %-34s %10s %8s %12s\n", "elementwise", "type", "what", "ms",
               "GB/s", "x copy");
        for (size_t i = 0; i < sizeof cases / sizeof cases[0] && !status; i++) {
            double t = ew_time(cases[i].fn, &s);
            if (t < 0) {
                status = 1;
                break;
            }
            double gbs = cases[i].bytes * (double)EW_N / t * 1e-9;
            if (i == 0) copy_gbs = gbs;
            printf("%-16s %-4s %-34s %10.2f %8.2f %12.2f\n", cases[i].name, "f32", cases[i].what,
                   t * 1e3, gbs, copy_gbs / gbs);
        }
    }
    if (status) {
        const char *e = nb_ctx_error(s.step) ? nb_ctx_error(s.step) : nb_ctx_error(s.params);
        fprintf(stderr, "nabla-bench: elementwise: %s\n", e ? e : "failed");
    }
    free(s.src);
    free(s.dst);
    nb_optim_free(s.opt);
    nb_ctx_free(s.step);
    nb_ctx_free(s.params);
    return status;
}

/* ---- demo step ------------------------------------------------------------------- */

/* The demo's sizes: sequences of DEMO_N digits, then a separator, then the
 * reversed digits, so T = 2 * DEMO_N positions. */
#define DEMO_N 8
#define DEMO_T (2 * DEMO_N)
#define DEMO_B 32
#define DEMO_D 32
#define DEMO_HEADS 4

/* One training step on a fresh batch: forward, cross-entropy over the
 * answer positions, backward, AdamW. */
static nb_status demo_step(nb_ctx *step, reverse_model *m, nb_optim *opt, nb_pcg32 *data) {
    int64_t ids[DEMO_B * DEMO_T], targets[DEMO_B * DEMO_N], pos[DEMO_T];
    for (int t = 0; t < DEMO_T; t++) pos[t] = t;
    reverse_make_batch(data, DEMO_B, DEMO_N, ids, targets);
    nb_ctx_reset(step);
    nb_tensor *logits = reverse_model_forward(
        step, m, nb_from_data(step, NB_I64, NB_SHAPE(DEMO_B, DEMO_T), ids),
        nb_from_data(step, NB_I64, NB_SHAPE(DEMO_T), pos));
    nb_tensor *loss = nb_cross_entropy(
        step, reverse_answer_logits(step, logits, DEMO_B, DEMO_N),
        nb_from_data(step, NB_I64, NB_SHAPE(DEMO_B * DEMO_N), targets));
    nb_params_zero_grad(&m->params);
    nb_status st = nb_backward(step, loss, NULL);
    return st ? st : nb_optim_step(opt);
}

static int bench_demo_step(void) {
    nb_ctx *params = nb_ctx_new(0), *step = nb_ctx_new(0);
    nb_pcg32 init, data, drop;
    nb_pcg32_seed(&init, 42, 1);
    nb_pcg32_seed(&data, 42, 2);
    nb_pcg32_seed(&drop, 42, 3);
    reverse_model m;
    nb_optim *opt = NULL;
    int status = 1;
    if (params && step &&
        reverse_model_init(params, &m, DEMO_N, DEMO_D, DEMO_HEADS, 0.1, &init) == NB_OK) {
        m.attn.dropout.rng = &drop;
        opt = nb_adamw_new(params, &m.params, nb_adamw_defaults(3e-3));
    }
    if (opt) {
        /* warm up (the arena grows to its peak), then the median over
         * DEMO_ROUNDS rounds of BENCH_SECONDS each of the time per step */
        enum { DEMO_ROUNDS = 5 };
        double per_step[DEMO_ROUNDS];
        nb_status st = NB_OK;
        for (int i = 0; i < 20 && !st; i++) st = demo_step(step, &m, opt, &data);
        for (int k = 0; k < DEMO_ROUNDS && !st; k++) {
            long steps = 0;
            double t0 = now_s(), t = t0;
            while (!st && t - t0 < BENCH_SECONDS) {
                st = demo_step(step, &m, opt, &data);
                steps++;
                t = now_s();
            }
            per_step[k] = (t - t0) / (double)steps;
            for (int j = k; j > 0 && per_step[j] < per_step[j - 1]; j--) { /* keep sorted */
                double tmp = per_step[j];
                per_step[j] = per_step[j - 1];
                per_step[j - 1] = tmp;
            }
        }
        if (!st) {
            printf("%-16s %-4s %-34s %10s %8s %12.2f %8s\n", "demo step", "f32",
                   "B 32, T 16, d 32, 4 heads, AdamW", "-", "-",
                   per_step[DEMO_ROUNDS / 2] * 1e6, "-");
            status = 0;
        }
    }
    if (status) {
        /* params also holds the optimizer's errors */
        const char *e = nb_ctx_error(step) ? nb_ctx_error(step) : nb_ctx_error(params);
        fprintf(stderr, "nabla-bench: demo step: %s\n", e ? e : "failed");
    }
    nb_optim_free(opt);
    nb_ctx_free(step);
    nb_ctx_free(params);
    return status;
}

/* ---- GPT sampling: tokens/s with and without the KV cache ---------------------- */

/* Tokens per second of nb_gpt_generate from a one-token prompt up to the
 * context length (so the cache never re-fills), over at least
 * BENCH_SECONDS. */
static double gpt_tok_per_s(nb_ctx *ctx, nb_gpt *m, bool cache, int64_t new_tokens,
                            nb_status *st) {
    int64_t prompt = 1, out[1024 + 1], n_out;
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    o.max_new_tokens = new_tokens, o.top_k = 10, o.use_cache = cache;
    long tokens = 0;
    double t0 = now_s(), t = t0;
    while (!*st && (t - t0 < BENCH_SECONDS || tokens == 0)) {
        *st = nb_gpt_generate(ctx, m, &prompt, 1, &o, out, &n_out);
        tokens += (long)(n_out - 1);
        o.seed++;
        t = now_s();
    }
    return (double)tokens / (t - t0);
}

static int bench_gpt_sample(nb_gpt_arch arch, int n_layer, int n_head, int64_t n_embd,
                            int64_t block, int64_t vocab, const char *what) {
    nb_ctx *params = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, 1337, 1);
    nb_gpt_config cfg = nb_gpt_config_default(arch);
    cfg.n_layer = n_layer, cfg.n_head = n_head, cfg.n_embd = n_embd, cfg.block_size = block;
    cfg.vocab_size = vocab, cfg.dropout = 0, cfg.no_grad = true;
    nb_gpt m;
    nb_status st = nb_gpt_init(params, &m, &cfg, &rng);
    if (!st) {
        int64_t n = block - 1 < 255 ? block - 1 : 255;
        double with = gpt_tok_per_s(params, &m, true, n, &st);
        double without = st ? 0 : gpt_tok_per_s(params, &m, false, n, &st);
        if (!st)
            printf("%-16s %-4s %-34s %10.0f tok/s with the KV cache, %.0f without (x%.1f)\n",
                   "gpt sample", "f32", what, with, without, with / without);
    }
    if (st) fprintf(stderr, "nabla-bench: gpt sample: %s\n", nb_ctx_error(params));
    nb_gpt_free(&m);
    nb_ctx_free(params);
    return st != NB_OK;
}

static const char usage[] =
    "usage: nabla-bench [FILTER]\n"
    "Times each kernel (forward, forward+backward, GFLOP/s), the elementwise kernels\n"
    "against memcpy (GB/s), one training step of the reverse-digits demo model and\n"
    "GPT sampling with and without the KV cache; FILTER keeps the cases whose name\n"
    "contains it (e.g.\n"
    "matmul, elementwise, \"demo step\", \"gpt sample\"). Prints a table on stdout;\n"
    "writes no files.\n"
    "  --help  this text\n";

int main(int argc, char **argv) {
    const char *filter = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        }
        if (argv[i][0] == '-' || filter) {
            fprintf(stderr, "nabla-bench: unexpected argument '%s' (see --help)\n", argv[i]);
            return 2;
        }
        filter = argv[i];
    }
    printf("%-16s %-4s %-34s %10s %8s %12s %8s\n", "case", "type", "shapes", "fwd us",
           "GFLOP/s", "fwd+bwd us", "GFLOP/s");
    int status = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (!filter || strstr(cases[i].name, filter)) status |= bench_one(&cases[i]);
    if (!filter || strstr("demo step", filter)) status |= bench_demo_step();
    if (!filter || strstr("elementwise", filter)) status |= bench_elementwise();
    if (!filter || strstr("gpt sample", filter)) {
        status |= bench_gpt_sample(NB_GPT_NANOGPT, 4, 4, 128, 64, 65,
                                   "nanoGPT 4/4/128, T 64, V 65");
        status |= bench_gpt_sample(NB_GPT_GPTMODEL, 12, 12, 768, 32, 50257,
                                   "GPTModel 124M, T 32");
    }
    return status;
}
