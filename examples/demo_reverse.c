/* demo_reverse - `make demo`: train a tiny causal multi-head attention model
 * to reverse sequences of digits, from a fixed seed, with dropout on.
 *
 *   input   7 3 9 0 4 4 1 8 | 8 1 4 4 0 9 3     (source, separator, answer so far)
 *   target                    8 1 4 4 0 9 3 7   (the next token at each answer position)
 *
 * The model: token + position embeddings -> MultiHeadAttention (causal, with
 * out_proj and dropout on the attention weights) with a residual connection
 * -> LayerNorm -> Linear head over the vocabulary. Reversal needs attention:
 * answer position j must look back at source position n-1-j, which only the
 * query/key match over positions can find.
 *
 * While it trains it shows step, loss, accuracy and steps/s; at the end it
 * decodes a held-out set greedily (each answer token from the model's own
 * previous tokens) and reports token and whole-sequence accuracy. It writes
 * the loss curve as CSV and SVG.
 *
 *   build/examples/demo_reverse --help */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nabla.h"
#include "reverse_model.h"

typedef struct config {
    int steps, batch, n, d_model, heads, threads, eval_size;
    double lr, dropout;
    const char *optim, *out_dir;
    uint64_t seed;
} config;

static const config defaults = {
    .steps = 1500, .batch = 32, .n = 8, .d_model = 32, .heads = 4, .threads = 1,
    .eval_size = 1000, .lr = 3e-3, .dropout = 0.1, .optim = "adamw",
    .out_dir = NULL, .seed = 42,
};

#define DIGITS REVERSE_DIGITS
#define SEP REVERSE_SEP
#define VOCAB REVERSE_VOCAB

typedef reverse_model model;

static void usage(FILE *f) {
    fprintf(f,
            "usage: demo_reverse [options]\n"
            "Trains a causal multi-head attention model to reverse digit sequences.\n\n"
            "  --steps N       training steps (default %d)\n"
            "  --lr X          learning rate (default %g)\n"
            "  --optim NAME    sgd, adam or adamw (default %s)\n"
            "  --seed S        seed for weights, data and dropout (default %llu)\n"
            "  --d-model D     embedding width (default %d)\n"
            "  --heads H       attention heads, dividing D (default %d)\n"
            "  --len N         digits per sequence (default %d)\n"
            "  --batch B       sequences per step (default %d)\n"
            "  --dropout P     dropout on the attention weights (default %g)\n"
            "  --threads T     worker threads for the kernels (default %d)\n"
            "  --out DIR       write DIR/loss.csv and DIR/loss.svg (default: no files)\n"
            "  --help          this text\n",
            defaults.steps, defaults.lr, defaults.optim, (unsigned long long)defaults.seed,
            defaults.d_model, defaults.heads, defaults.n, defaults.batch, defaults.dropout,
            defaults.threads);
}

static bool parse_int(const char *s, int lo, int hi, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

static bool parse_double(const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end || end == s || !(v >= lo && v <= hi)) return false;
    *out = v;
    return true;
}

/* Returns 0 to go on, 1 for --help, 2 for a bad command line. */
static int parse_args(int argc, char **argv, config *c) {
    *c = defaults;
    for (int i = 1; i < argc; i += 2) { /* options come in (name, value) pairs */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 1;
        }
        if (!v) {
            fprintf(stderr, "demo_reverse: %s needs a value (see --help)\n", a);
            return 2;
        }
        if (!strcmp(a, "--steps")) ok = parse_int(v, 0, 10000000, &c->steps);
        else if (!strcmp(a, "--lr")) ok = parse_double(v, 0, 10, &c->lr);
        else if (!strcmp(a, "--optim")) {
            c->optim = v;
            ok = !strcmp(v, "sgd") || !strcmp(v, "adam") || !strcmp(v, "adamw");
        } else if (!strcmp(a, "--seed")) {
            int s;
            ok = parse_int(v, 0, 2147483647, &s);
            c->seed = (uint64_t)s;
        } else if (!strcmp(a, "--d-model")) ok = parse_int(v, 1, 4096, &c->d_model);
        else if (!strcmp(a, "--heads")) ok = parse_int(v, 1, 256, &c->heads);
        else if (!strcmp(a, "--len")) ok = parse_int(v, 1, 64, &c->n);
        else if (!strcmp(a, "--batch")) ok = parse_int(v, 1, 65536, &c->batch);
        else if (!strcmp(a, "--dropout")) ok = parse_double(v, 0, 1, &c->dropout);
        else if (!strcmp(a, "--threads")) ok = parse_int(v, 1, 256, &c->threads);
        else if (!strcmp(a, "--out")) c->out_dir = v;
        else {
            fprintf(stderr, "demo_reverse: unknown option %s (see --help)\n", a);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "demo_reverse: bad value '%s' for %s (see --help)\n", v, a);
            return 2;
        }
    }
    if (c->d_model % c->heads) {
        fprintf(stderr, "demo_reverse: --d-model %d is not divisible by --heads %d\n",
                c->d_model, c->heads);
        return 2;
    }
    return 0;
}

static nb_status model_init(model *m, nb_ctx *pctx, const config *c, nb_pcg32 *rng) {
    return reverse_model_init(pctx, m, c->n, c->d_model, c->heads, c->dropout, rng);
}

static void model_train(model *m, bool on) {
    nb_nn_mha_train(&m->attn, on);
}

static int argmax_row(const float *p, int len) {
    int best = 0;
    for (int k = 1; k < len; k++)
        if (p[k] > p[best]) best = k;
    return best;
}

/* Greedy decoding of a held-out set: each answer token comes from the
 * model's own previous answer tokens. */
static void evaluate(model *m, nb_ctx *ctx, const config *c, double *tok_acc, double *seq_acc) {
    int B = c->eval_size, n = c->n, T = 2 * n;
    nb_pcg32 rng; /* another stream than training: these sequences are held out */
    nb_pcg32_seed(&rng, c->seed, 977);
    int64_t *ids = malloc((size_t)B * T * sizeof *ids), *pos = malloc((size_t)T * sizeof *pos);
    int64_t *targets = malloc((size_t)B * n * sizeof *targets);
    int *right = calloc((size_t)B, sizeof *right);
    long tokens = 0, seqs = 0;
    if (ids && pos && targets && right) {
        reverse_make_batch(&rng, B, n, ids, targets);
        for (int t = 0; t < T; t++) pos[t] = t;
        model_train(m, false);
        bool was = nb_set_grad_enabled(ctx, false);
        /* Answer slot j is predicted at position n+j; the guess is fed back at
         * n+j+1. Later slots still hold the true answer, but the causal mask
         * keeps position n+j from seeing them. */
        for (int j = 0; j < n; j++) {
            nb_ctx_reset(ctx);
            nb_tensor *logits =
                reverse_model_forward(ctx, m, nb_from_data(ctx, NB_I64, NB_SHAPE(B, T), ids),
                                      nb_from_data(ctx, NB_I64, NB_SHAPE(T), pos));
            if (!logits) break;
            for (int b = 0; b < B; b++) {
                const float *p = (const float *)logits->data + ((size_t)b * T + n + j) * VOCAB;
                int64_t guess = argmax_row(p, VOCAB);
                right[b] += guess == targets[(size_t)b * n + j];
                if (n + 1 + j < T) ids[(size_t)b * T + n + 1 + j] = guess;
            }
        }
        nb_set_grad_enabled(ctx, was);
        model_train(m, true);
        for (int b = 0; b < B; b++) tokens += right[b], seqs += right[b] == n;
    }
    *tok_acc = 100.0 * (double)tokens / ((double)B * n);
    *seq_acc = 100.0 * (double)seqs / B;
    free(ids), free(pos), free(targets), free(right);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A self-contained SVG line chart of the loss (log scale). */
static bool write_svg(const char *path, const float *loss, int steps) {
    FILE *f = fopen(path, "w");
    if (!f) return false;
    const double W = 640, H = 360, L = 60, R = 20, Tp = 30, Bm = 40;
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < steps; i++)
        if (loss[i] > 0) lo = fmin(lo, log10(loss[i])), hi = fmax(hi, log10(loss[i]));
    if (!(hi > lo)) hi = lo + 1;
    lo = floor(lo), hi = ceil(hi);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n", W, H);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"%g\" y=\"18\" text-anchor=\"middle\">nabla demo: training loss "
               "(cross-entropy, log scale)</text>\n", W / 2);
    for (double e = lo; e <= hi; e++) {
        double y = Tp + (hi - e) / (hi - lo) * (H - Tp - Bm);
        fprintf(f, "<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" stroke=\"#ddd\"/>"
                   "<text x=\"%g\" y=\"%.1f\" text-anchor=\"end\">1e%+.0f</text>\n",
                L, y, W - R, y, L - 6, y + 4, e);
    }
    for (int k = 0; k <= 4; k++) {
        double x = L + k / 4.0 * (W - L - R);
        fprintf(f, "<text x=\"%.1f\" y=\"%g\" text-anchor=\"middle\">%d</text>\n", x, H - Bm + 16,
                (int)lround(k / 4.0 * steps));
    }
    fprintf(f, "<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n", W / 2, H - 6);
    fprintf(f, "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.2\" points=\"");
    for (int i = 0; i < steps; i++) {
        if (!(loss[i] > 0)) continue;
        double x = L + (steps > 1 ? (double)i / (steps - 1) : 0) * (W - L - R);
        double y = Tp + (hi - log10(loss[i])) / (hi - lo) * (H - Tp - Bm);
        fprintf(f, "%.1f,%.1f ", x, y);
    }
    fprintf(f, "\"/>\n</svg>\n");
    bool ok = !ferror(f);
    return fclose(f) == 0 && ok;
}

/* DIR/loss.csv and DIR/loss.svg: the files --out DIR asks for. */
static void write_curve(const config *c, const float *curve, const float *accs) {
    mkdir(c->out_dir, 0755);
    char path[1024];
    snprintf(path, sizeof path, "%s/loss.csv", c->out_dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "step,loss,train_accuracy\n");
        for (int s = 0; s < c->steps; s++) fprintf(f, "%d,%.6f,%.2f\n", s + 1, curve[s], accs[s]);
        bool ok = !ferror(f);
        if (fclose(f) != 0 || !ok) fprintf(stderr, "demo_reverse: writing %s failed\n", path);
        else printf("wrote %s", path);
        snprintf(path, sizeof path, "%s/loss.svg", c->out_dir);
        if (write_svg(path, curve, c->steps)) printf(" and %s", path);
        printf("\n");
    } else {
        fprintf(stderr, "demo_reverse: cannot write %s: %s\n", path, strerror(errno));
    }

}

/* Builds the model and its optimizer, trains, decodes the held-out set and
 * writes the loss curve; exits 0 when token accuracy reaches 99%.
 * Long: a walkthrough of one training run, read top to bottom; the training
 * step stays in the loop, beside the set-up it uses. */
int main(int argc, char **argv) {
    config c;
    int rc = parse_args(argc, argv, &c);
    if (rc) return rc == 1 ? 0 : 2;
    nb_set_num_threads(c.threads);

    int B = c.batch, n = c.n, T = 2 * n;
    nb_pcg32 rng_init, rng_data, rng_drop; /* one stream per purpose */
    nb_pcg32_seed(&rng_init, c.seed, 1);
    nb_pcg32_seed(&rng_data, c.seed, 2);
    nb_pcg32_seed(&rng_drop, c.seed, 3);

    nb_ctx *pctx = nb_ctx_new(0), *step = nb_ctx_new(0);
    model m;
    if (!pctx || !step || model_init(&m, pctx, &c, &rng_init) != NB_OK) {
        fprintf(stderr, "demo_reverse: %s\n", pctx ? nb_ctx_error(pctx) : "out of memory");
        return 1;
    }
    /* dropout draws from its own stream */
    m.attn.dropout.rng = &rng_drop;
    nb_optim *opt = !strcmp(c.optim, "sgd") ? nb_sgd_new(pctx, &m.params, (nb_sgd_opts){
                                                             .lr = c.lr, .momentum = 0.9})
                    : !strcmp(c.optim, "adam") ? nb_adam_new(pctx, &m.params, nb_adam_defaults(c.lr))
                                               : nb_adamw_new(pctx, &m.params, nb_adamw_defaults(c.lr));
    if (!opt) {
        fprintf(stderr, "demo_reverse: %s\n", nb_ctx_error(pctx));
        return 1;
    }
    size_t n_weights = 0;
    for (int i = 0; i < m.params.n; i++) n_weights += nb_list_tensor(&m.params, i)->numel;
    printf("nabla demo: reverse %d digits with causal multi-head attention\n", n);
    printf("  model: d_model %d, %d heads, %zu weights; %s lr %g, batch %d, dropout %g, seed %llu\n",
           c.d_model, c.heads, n_weights, c.optim, c.lr, B, c.dropout,
           (unsigned long long)c.seed);

    int64_t *ids = malloc((size_t)B * T * sizeof *ids), *targets = malloc((size_t)B * n * sizeof *targets);
    int64_t *pos = malloc((size_t)T * sizeof *pos);
    float *curve = calloc((size_t)c.steps + 1, sizeof *curve);
    float *accs = calloc((size_t)c.steps + 1, sizeof *accs);
    if (!ids || !targets || !pos || !curve || !accs) return 1;
    for (int t = 0; t < T; t++) pos[t] = t;

    bool tty = isatty(STDOUT_FILENO);
    double t0 = now(), last = t0;
    int last_step = 0;
    for (int s = 1; s <= c.steps; s++) {
        nb_ctx_reset(step);
        reverse_make_batch(&rng_data, B, n, ids, targets);
        nb_tensor *logits =
            reverse_model_forward(step, &m, nb_from_data(step, NB_I64, NB_SHAPE(B, T), ids),
                                  nb_from_data(step, NB_I64, NB_SHAPE(T), pos));
        nb_tensor *ans = reverse_answer_logits(step, logits, B, n);
        nb_tensor *loss = nb_cross_entropy(step, ans, nb_from_data(step, NB_I64, NB_SHAPE(B * n), targets));
        nb_params_zero_grad(&m.params);
        if (nb_backward(step, loss, NULL) != NB_OK || nb_optim_step(opt) != NB_OK) {
            fprintf(stderr, "\ndemo_reverse: step %d: %s\n", s,
                    nb_ctx_error(step) ? nb_ctx_error(step) : nb_ctx_error(pctx));
            return 1;
        }
        int right = 0;
        for (int r = 0; r < B * n; r++)
            right += argmax_row((const float *)ans->data + (size_t)r * VOCAB, VOCAB) == targets[r];
        curve[s - 1] = (float)nb_item(loss);
        accs[s - 1] = 100.0f * (float)right / (float)(B * n);
        double t = now();
        if (s == c.steps || t - last > (tty ? 0.1 : 2.0)) {
            printf("%sstep %5d/%d  loss %.4f  acc %5.1f%%  %6.0f steps/s%s", tty ? "\r" : "  ", s,
                   c.steps, curve[s - 1], accs[s - 1], (s - last_step) / (t - last),
                   tty ? "" : "\n");
            fflush(stdout);
            last = t, last_step = s;
        }
    }
    double train_s = now() - t0;
    printf("%strained %d steps in %.2f s (%.0f steps/s, %.0f us/step)\n", tty ? "\n" : "",
           c.steps, train_s, c.steps / train_s, 1e6 * train_s / (c.steps ? c.steps : 1));

    double tok_acc, seq_acc;
    evaluate(&m, step, &c, &tok_acc, &seq_acc);
    printf("held-out (%d new sequences, greedy decoding): token accuracy %.2f%%, "
           "sequence accuracy %.2f%%\n", c.eval_size, tok_acc, seq_acc);

    /* the loss curve, CSV and SVG, only when asked for */
    if (c.out_dir) write_curve(&c, curve, accs);

    free(ids), free(targets), free(pos), free(curve), free(accs);
    nb_optim_free(opt);
    nb_ctx_free(step);
    nb_ctx_free(pctx);
    return tok_acc >= 99.0 ? 0 : 1;
}
