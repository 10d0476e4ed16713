/* nabla-soak - `make soak`: long training of the reverse-digits demo model (examples/
 * demo_reverse.c: token + position embeddings, causal multi-head attention
 * with dropout, residual, LayerNorm, linear head; AdamW) to catch leaks,
 * slow-downs and resume bugs.
 *
 *   run A  trains --steps steps; after --warmup steps its resident memory
 *          must grow by less than 1 MB, and its speed must stay within 10%
 *          of its early value. The machine may be shared, so the early
 *          value is measured again at the end: 500-step blocks of the
 *          long-run model alternate with blocks of a fresh model (past its
 *          first 500 steps), and the best blocks of each are compared. The
 *          drift against A's own blocks right after warm-up is printed too.
 *          A records a hash of the parameters every --every steps.
 *   run B  trains the same, but every --every steps saves a checkpoint
 *          (parameters, optimizer, data and dropout generators), throws the
 *          model and optimizer away, builds them again from another seed,
 *          loads the checkpoint and goes on. Its hashes must equal A's:
 *          bit-identical resumption.
 * Prints figures and PASS or FAIL; exits 0 only on PASS. The checkpoint
 * lives in a temporary directory that is removed at the end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nabla.h"
#include "now.h"

#define N     8 /* digits per sequence; the input is 2N tokens */
#define T     (2 * N)
#define VOCAB 11
#define SEP   10
#define BATCH 32
#define D     32
#define HEADS 4
#define BLOCK 500

typedef struct opts {
    int steps, threads, every, warmup;
} opts;

typedef struct trainer {
    nb_ctx *pctx, *step;
    nb_nn_embedding tok, pos;
    nb_nn_mha attn;
    nb_nn_layer_norm norm;
    nb_nn_linear head;
    nb_tensor_list params, extra;
    nb_optim *opt;
    nb_pcg32 data_rng, drop_rng; /* saved in the checkpoint */
} trainer;

static void usage(FILE *f) {
    fprintf(f, "usage: nabla-soak [--steps N] [--threads T] [--every K] [--warmup W]\n"
               "Trains the reverse-digits demo model twice for N steps (default 20000) at T threads (1):\n"
               "uninterrupted, and with a checkpoint save/load/resume every K steps (1000).\n"
               "Checks RSS growth < 1 MB and steps/s within 10%% after W warm-up steps\n"
               "(2000), and bit-identical resumption. Prints PASS or FAIL.\n");
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, rss = 0;
    if (f && fscanf(f, "%ld %ld", &pages, &rss) != 2)
        rss = 0;
    if (f)
        fclose(f);
    return rss * (sysconf(_SC_PAGESIZE) / 1024);
}

/* The model, its optimizer and generators, with weights drawn from seed. */
static nb_status trainer_init(trainer *t, uint64_t seed) {
    memset(t, 0, sizeof *t);
    t->pctx = nb_ctx_new(0);
    t->step = nb_ctx_new(0);
    nb_pcg32 init;
    nb_pcg32_seed(&init, seed, 1);
    nb_pcg32_seed(&t->data_rng, 42, 2);
    nb_pcg32_seed(&t->drop_rng, 42, 3);
    nb_status st = nb_nn_embedding_init(t->pctx, &t->tok, VOCAB, D, NB_F32, &init);
    if (!st)
        st = nb_nn_embedding_init(t->pctx, &t->pos, T, D, NB_F32, &init);
    if (!st)
        st = nb_nn_mha_init(t->pctx, &t->attn, D, D, T, 0.1, HEADS, false, NB_F32, &t->drop_rng);
    if (!st)
        st = nb_nn_layer_norm_init(t->pctx, &t->norm, D, 1e-5, true, NB_F32);
    if (!st)
        st = nb_nn_linear_init(t->pctx, &t->head, D, VOCAB, true, NB_F32, &init);
    nb_pcg32_seed(&t->drop_rng, 42, 3); /* the same dropout stream whatever the init */
    if (!st)
        st = nb_params_add_prefixed(t->pctx, &t->params, "tok", &t->tok.params);
    if (!st)
        st = nb_params_add_prefixed(t->pctx, &t->params, "pos", &t->pos.params);
    if (!st)
        st = nb_params_add_prefixed(t->pctx, &t->params, "attn", &t->attn.params);
    if (!st)
        st = nb_params_add_prefixed(t->pctx, &t->params, "norm", &t->norm.params);
    if (!st)
        st = nb_params_add_prefixed(t->pctx, &t->params, "head", &t->head.params);
    if (!st)
        st = nb_list_add(&t->extra, "data_rng", nb_pcg32_tensor(t->pctx, &t->data_rng));
    if (!st)
        st = nb_list_add(&t->extra, "drop_rng", nb_pcg32_tensor(t->pctx, &t->drop_rng));
    if (!st) {
        t->opt = nb_adamw_new(t->pctx, &t->params, nb_adamw_defaults(3e-3));
        if (!t->opt)
            st = nb_ctx_status(t->pctx) ? nb_ctx_status(t->pctx) : NB_ERR_MEMORY;
    }
    return st;
}

static void trainer_free(trainer *t) {
    nb_optim_free(t->opt);
    nb_list_free(&t->params);
    nb_list_free(&t->extra);
    nb_ctx_free(t->step);
    nb_ctx_free(t->pctx);
}

/* One training step on a fresh batch of digit reversals. */
static nb_status train_step(trainer *t) {
    int64_t ids[BATCH * T], pos[T], targets[BATCH * N];
    for (int b = 0; b < BATCH; b++) {
        int64_t *row = ids + b * T;
        for (int i = 0; i < N; i++)
            row[i] = nb_pcg32_bounded(&t->data_rng, 10);
        row[N] = SEP;
        for (int j = 0; j < N; j++)
            targets[b * N + j] = row[N - 1 - j];
        for (int j = 0; j + 1 < N; j++)
            row[N + 1 + j] = targets[b * N + j];
    }
    for (int i = 0; i < T; i++)
        pos[i] = i;
    nb_ctx *c = t->step;
    nb_ctx_reset(c);
    nb_optim_zero_grad(t->opt);
    nb_tensor *x = nb_add(
        c, nb_nn_embedding_forward(c, &t->tok, nb_from_data(c, NB_I64, NB_SHAPE(BATCH, T), ids)),
        nb_nn_embedding_forward(c, &t->pos, nb_from_data(c, NB_I64, NB_SHAPE(T), pos)));
    nb_tensor *h = nb_add(c, x, nb_nn_mha_forward(c, &t->attn, x));
    nb_tensor *logits = nb_nn_linear_forward(c, &t->head, nb_nn_layer_norm_forward(c, &t->norm, h));
    nb_tensor *parts[2];
    if (!logits || nb_split(c, logits, 1, 2, (const int64_t[]){N, N}, parts))
        return nb_ctx_status(c);
    nb_tensor *ans = nb_reshape(c, parts[1], NB_SHAPE(BATCH * N, VOCAB));
    nb_tensor *loss =
        nb_cross_entropy(c, ans, nb_from_data(c, NB_I64, NB_SHAPE(BATCH * N), targets));
    if (nb_backward(c, loss, NULL))
        return nb_ctx_status(c);
    return nb_optim_step(t->opt);
}

static uint64_t params_hash(const trainer *t) {
    uint64_t h = 1469598103934665603u;
    for (int i = 0; i < t->params.n; i++) {
        const nb_tensor *p = nb_list_tensor(&t->params, i);
        const unsigned char *b = p->data;
        for (size_t k = 0; k < p->numel * nb_dtype_size(p->dtype); k++)
            h = (h ^ b[k]) * 1099511628211u;
    }
    return h;
}

static double timed_block(trainer *t) {
    double t0 = now_s();
    for (int i = 0; i < BLOCK; i++)
        if (train_step(t))
            return 1e30;
    return now_s() - t0;
}

/* Best block times of the long-run model and of a fresh one, alternated. */
static void interleaved_speed(trainer *old, double *best_old, double *best_fresh) {
    trainer fresh;
    *best_old = *best_fresh = 1e30;
    if (trainer_init(&fresh, 99))
        return;
    timed_block(&fresh); /* its warm-up: arenas grown, caches filled */
    for (int k = 0; k < 4; k++) {
        double a = timed_block(old), b = timed_block(&fresh);
        if (a < *best_old)
            *best_old = a;
        if (b < *best_fresh)
            *best_fresh = b;
    }
    trainer_free(&fresh);
}

/* Run A: figures and hashes. Returns the number of failed checks. */
static int run_plain(const opts *o, uint64_t *hashes) {
    trainer t;
    if (trainer_init(&t, 7))
        return fprintf(stderr, "nabla-soak: init failed\n"), 1;
    long rss_warm = 0;
    double best_early = 1e30, best_late = 1e30, block_start = now_s(), t0 = now_s();
    int late_from = o->steps - o->steps / 5;
    for (int s = 1; s <= o->steps; s++) {
        if (train_step(&t)) {
            fprintf(stderr, "nabla-soak: step %d failed: %s\n", s, nb_ctx_error(t.step));
            trainer_free(&t);
            return 1;
        }
        if (s % o->every == 0)
            hashes[s / o->every] = params_hash(&t);
        if (s == o->warmup)
            rss_warm = rss_kb();
        if (s % BLOCK == 0) {
            double dt = now_s() - block_start;
            if (s > o->warmup && s <= o->warmup + o->steps / 5 && dt < best_early)
                best_early = dt;
            if (s > late_from && dt < best_late)
                best_late = dt;
            block_start = now_s();
        }
    }
    double total = now_s() - t0;
    long rss_end = rss_kb(), grow = rss_end - rss_warm;
    double early = BLOCK / best_early, late = BLOCK / best_late,
           drift = 100 * (late - early) / early;
    double b_old, b_fresh;
    interleaved_speed(&t, &b_old, &b_fresh);
    double v_old = BLOCK / b_old, v_fresh = BLOCK / b_fresh,
           change = 100 * (v_old - v_fresh) / v_fresh;
    int bad = 0;
    printf("  run A: %d steps in %.1f s (%.0f steps/s)\n", o->steps, total, o->steps / total);
    printf("  RSS after warm-up (step %d) %ld kB, at the end %ld kB: %+ld kB  %s\n", o->warmup,
           rss_warm, rss_end, grow, grow < 1024 ? "ok" : "FAIL (>= 1 MB)");
    bad += grow >= 1024;
    printf("  speed, best %d-step blocks: %.0f steps/s after warm-up, %.0f in the last 20%% "
           "(%+.1f%%, machine load included)\n",
           BLOCK, early, late, drift);
    printf(
        "  speed at the end, alternating with a fresh model: %.0f vs %.0f steps/s: %+.1f%%  %s\n",
        v_old, v_fresh, change, change > -10 ? "ok" : "FAIL (> 10% slower)");
    bad += change <= -10;
    trainer_free(&t);
    return bad;
}

/* Run B: resume from a checkpoint every o->every steps; compare hashes. */
static int run_resumed(const opts *o, const uint64_t *hashes, const char *path) {
    trainer t;
    if (trainer_init(&t, 7))
        return 1;
    int bad = 0, checks = 0;
    for (int s = 1; s <= o->steps && !bad; s++) {
        if (train_step(&t)) {
            fprintf(stderr, "nabla-soak: resumed step %d failed: %s\n", s, nb_ctx_error(t.step));
            bad++;
            break;
        }
        if (s % o->every)
            continue;
        if (nb_save_checkpoint(t.pctx, path, &t.params, t.opt, &t.extra, 0, NULL, NULL)) {
            fprintf(stderr, "nabla-soak: save at step %d: %s\n", s, nb_ctx_error(t.pctx));
            bad++;
            break;
        }
        trainer_free(&t);
        if (trainer_init(&t, 1000 + (uint64_t)s) ||
            nb_load_checkpoint(t.pctx, path, &t.params, t.opt, &t.extra)) {
            fprintf(stderr, "nabla-soak: load at step %d: %s\n", s, nb_ctx_error(t.pctx));
            bad++;
            break;
        }
        checks++;
        if (params_hash(&t) != hashes[s / o->every]) {
            fprintf(stderr, "nabla-soak: step %d: the resumed run differs from run A\n", s);
            bad++;
        }
    }
    printf("  run B: %d save/load/resume cycles, parameters bit-identical to run A: %s\n", checks,
           bad ? "FAIL" : "ok");
    trainer_free(&t);
    return bad;
}

static int parse(int argc, char **argv, opts *o) {
    *o = (opts){.steps = 20000, .threads = 1, .every = 1000, .warmup = 2000};
    for (int i = 1; i < argc; i += 2) { /* options come in (name, value) pairs */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return 1;
        }
        int *dst = !strcmp(argv[i], "--steps")     ? &o->steps
                   : !strcmp(argv[i], "--threads") ? &o->threads
                   : !strcmp(argv[i], "--every")   ? &o->every
                   : !strcmp(argv[i], "--warmup")  ? &o->warmup
                                                   : NULL;
        char *end;
        errno = 0;
        long v = dst && i + 1 < argc ? strtol(argv[i + 1], &end, 10) : -1;
        if (!dst || i + 1 >= argc || errno || *end || v < 1 || v > 100000000) {
            fprintf(stderr, "nabla-soak: bad option '%s' (see --help)\n", argv[i]);
            return 2;
        }
        *dst = (int)v;
    }
    if (o->warmup + o->steps / 5 > o->steps - o->steps / 5 || o->every > o->steps) {
        fprintf(stderr, "nabla-soak: --steps too small for --warmup and --every\n");
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    opts o;
    int rc = parse(argc, argv, &o);
    if (rc)
        return rc == 1 ? 0 : 2;
    char dir[] = "/tmp/nabla-soak-XXXXXX", path[64];
    if (!mkdtemp(dir))
        return perror("nabla-soak: mkdtemp"), 1;
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    nb_set_num_threads(o.threads);
    printf("nabla-soak: reverse-digits demo model, %d steps at %d thread(s), resume every %d\n", o.steps,
           nb_get_num_threads(), o.every);
    uint64_t *hashes = calloc((size_t)(o.steps / o.every + 1), sizeof *hashes);
    int bad = run_plain(&o, hashes);
    bad += run_resumed(&o, hashes, path);
    free(hashes);
    unlink(path);
    rmdir(dir);
    nb_set_num_threads(1);
    printf("nabla-soak: %s (%d threads)\n", bad ? "FAIL" : "PASS", o.threads);
    return bad ? 1 : 0;
}
