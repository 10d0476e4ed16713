/* gpt_train.c - the training loop of `nabla-gpt train`: data (text or
 * replayed batches), the model (fresh, --init or --resume), nanoGPT's loop
 * (evaluate, get_lr, accumulate, clip, AdamW), progress, log.jsonl and the
 * three output files. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gpt_train.h"
#include "gpt_svg.h"

#define EXIT_INTERNAL 1
#define PATH_LEN 4096

typedef struct run {
    const gpt_flags *f;
    const char *prog;
    gpt_train_hooks hooks;
    nb_ctx *pctx, *sctx;   /* long-lived (model, data, optimizer) and per-step */
    nb_gpt gpt;
    nb_optim *opt;
    nb_lr_schedule sched;
    nb_pcg32 rng_model;    /* init draws, then dropout masks */
    nb_pcg32 rng_batch;    /* get_batch offsets */
    int64_t accum;         /* micro-batches per step on this rank (see setup) */
    nb_pcg32 *peers;       /* world > 1: every rank's (rng_model, rng_batch), 2 per rank,
                              gathered before a save so rank 0's checkpoint holds them all */
    nb_tensor *iter_t;     /* I64 scalar: the next iteration (for the checkpoint) */
    /* text mode */
    nb_char_vocab vocab;
    bool has_vocab;
    nb_token_split split;
    nb_tensor *eval_x[2], *eval_y[2]; /* I64 (eval_iters, B, T) per split, fixed */
    /* --batches mode */
    nb_tensor *bx, *by;    /* I64 (N, B, T) */
    int64_t B, T, max_iters, iter;
    char path_log[PATH_LEN], path_model[PATH_LEN], path_ckpt[PATH_LEN], path_svg[PATH_LEN];
} run;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* ---- data: text --------------------------------------------------------- */

/* The vocabulary stored in a model or checkpoint file's metadata, if any. */
static bool vocab_from_meta(run *r, int n, const char **keys, const char **values) {
    for (int i = 0; i < n; i++)
        if (!strcmp(keys[i], "vocab") && !nb_char_vocab_from_string(r->pctx, values[i], &r->vocab))
            return r->has_vocab = true;
    return false;
}

/* eval_iters fixed batches of one split, drawn once from their own stream. */
static int draw_eval_batches(run *r, int which, const nb_tensor *data) {
    int64_t E = r->f->eval_iters, n = r->B * r->T;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)r->f->seed, 4 + (uint64_t)which);
    r->eval_x[which] = nb_empty(r->pctx, NB_I64, NB_SHAPE(E, r->B, r->T));
    r->eval_y[which] = nb_empty(r->pctx, NB_I64, NB_SHAPE(E, r->B, r->T));
    for (int64_t e = 0; e < E && !nb_ctx_error(r->pctx); e++) {
        nb_tensor *x, *y;
        nb_ctx_reset(r->sctx);
        if (nb_get_batch(r->sctx, data, r->B, r->T, &rng, &x, &y))
            return gpt_fail(r->prog, "%s", nb_ctx_error(r->sctx));
        memcpy((int64_t *)r->eval_x[which]->data + e * n, x->data, (size_t)n * 8);
        memcpy((int64_t *)r->eval_y[which]->data + e * n, y->data, (size_t)n * 8);
    }
    return nb_ctx_error(r->pctx) ? gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx)) : 0;
}

static int load_text(run *r) {
    size_t len;
    char *text = gpt_read_file(r->prog, r->f->data, &len);
    if (!text) return GPT_EXIT_USAGE;
    nb_tensor *ids = NULL;
    if (r->has_vocab || !nb_char_vocab_build(r->pctx, text, len, &r->vocab))
        ids = nb_char_encode(r->pctx, &r->vocab, text, len);
    free(text);
    if (!ids) return gpt_fail(r->prog, "--data=%s: %s", r->f->data, nb_ctx_error(r->pctx));
    r->has_vocab = true;
    r->split = nb_token_split_90_10(r->pctx, ids);
    int64_t n = ids->shape[0], need = r->T + 1;
    int64_t n_val = r->split.val ? r->split.val->shape[0] : 0;
    if (!r->split.train || r->split.train->shape[0] < need || n_val < need)
        return gpt_fail(r->prog,
                        "--data=%s: %lld characters are too few: the 90%% train and 10%% val "
                        "parts need at least block_size + 1 = %lld characters each (the "
                        "text needs %lld); use a longer text or a smaller --block_size",
                        r->f->data, (long long)n, (long long)need, (long long)(10 * need));
    int st = draw_eval_batches(r, 0, r->split.train);
    return st ? st : draw_eval_batches(r, 1, r->split.val);
}

/* ---- data: replayed batches --------------------------------------------- */
static int load_batches(run *r) {
    nb_tensor_list l = {0};
    if (nb_load_safetensors(r->pctx, r->f->batches, &l))
        return gpt_fail(r->prog, "--batches: %s", nb_ctx_error(r->pctx));
    r->bx = nb_list_get(&l, "x"), r->by = nb_list_get(&l, "y");
    if (!r->bx || !r->by)
        return gpt_fail(r->prog, "--batches=%s: needs tensors 'x' and 'y'", r->f->batches);
    char sx[64], sy[64];
    nb_shape_str(r->bx, sx, sizeof sx), nb_shape_str(r->by, sy, sizeof sy);
    if (r->bx->dtype != NB_I64 || r->by->dtype != NB_I64 || r->bx->ndim != 3 ||
        !nb_same_shape(r->bx, r->by))
        return gpt_fail(r->prog, "--batches=%s: x is %s %s and y %s %s; expected both int64 "
                        "(N, B, T) of one shape", r->f->batches, nb_dtype_name(r->bx->dtype), sx,
                        nb_dtype_name(r->by->dtype), sy);
    /* Over W ranks each batch splits row-wise into W slices, one a rank, of
     * k_local micro-batches each (accum_steps, see setup). */
    int64_t k = r->f->gradient_accumulation_steps, N = r->bx->shape[0], W = r->hooks.world;
    if (r->bx->shape[1] % (k * (k % W ? W : 1)))
        return gpt_fail(r->prog, "--batches=%s: batches of %lld rows do not split into "
                        "%lld rank(s) x --gradient_accumulation_steps=%lld micro-batches",
                        r->f->batches, (long long)r->bx->shape[1], (long long)W, (long long)k);
    r->B = r->bx->shape[1] / (k * (k % W ? W : 1)), r->T = r->bx->shape[2];
    if (r->max_iters == 0) r->max_iters = N;
    if (r->max_iters > N)
        return gpt_fail(r->prog, "--batches=%s: %lld batches, fewer than --max_iters=%lld",
                        r->f->batches, (long long)N, (long long)r->max_iters);
    return 0;
}

/* Every token id of the replayed batches must be a row of the embedding. */
static int check_batch_ids(run *r) {
    int64_t V = r->gpt.cfg.vocab_size;
    for (int w = 0; w < 2; w++) {
        const nb_tensor *t = w ? r->by : r->bx;
        for (size_t i = 0; i < t->numel; i++) {
            int64_t v = ((const int64_t *)t->data)[i];
            if (v < 0 || v >= V)
                return gpt_fail(r->prog, "--batches=%s: %s holds token %lld at flat index %zu, "
                                "outside the vocabulary 0..%lld", r->f->batches, w ? "y" : "x",
                                (long long)v, i, (long long)V - 1);
        }
    }
    return 0;
}

/* ---- the model ------------------------------------------------------------ */
static nb_gpt_config config_from_flags(const run *r, int64_t vocab_size) {
    const gpt_flags *f = r->f;
    nb_gpt_config c = nb_gpt_config_default(gpt_flags_arch(f));
    c.vocab_size = vocab_size;
    c.block_size = f->block_size;
    c.n_layer = (int)f->n_layer;
    c.n_head = (int)f->n_head;
    c.n_embd = f->n_embd;
    c.dropout = f->dropout;
    c.bias = f->bias;
    c.qkv_bias = f->qkv_bias;
    c.dtype = gpt_flags_dtype(f);
    return c;
}

static int model_from_init(run *r) {
    const char *keys[64], *values[64];
    int n_meta = 0;
    nb_tensor_list sd = {0};
    if (nb_load_safetensors_meta(r->pctx, r->f->init, &sd, 64, &n_meta, keys, values))
        return gpt_fail(r->prog, "--init: %s", nb_ctx_error(r->pctx));
    vocab_from_meta(r, n_meta < 64 ? n_meta : 64, keys, values);
    nb_status st = nb_gpt_from_state_dict(r->pctx, &r->gpt, &sd, (int)r->f->n_head,
                                          r->f->dropout, gpt_flags_dtype(r->f), &r->rng_model);
    nb_list_free(&sd);
    return st ? gpt_fail(r->prog, "--init=%s: %s", r->f->init, nb_ctx_error(r->pctx)) : 0;
}

static int build_model(run *r) {
    if (r->f->init[0]) return model_from_init(r);
    int64_t V = r->has_vocab ? r->vocab.size : r->f->vocab_size;
    if (V < 1)
        return gpt_fail(r->prog, "--batches without --init needs --vocab_size");
    nb_gpt_config c = config_from_flags(r, V);
    if (nb_gpt_init(r->pctx, &r->gpt, &c, &r->rng_model))
        return gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx));
    return 0;
}

/* ---- one step ------------------------------------------------------------ */
static nb_tensor *micro_loss(nb_ctx *ctx, int micro, void *user) {
    run *r = user;
    nb_tensor *x, *y;
    if (r->bx) { /* a batch's rows: rank r takes the r-th of `world` equal slices, and its
                    micro-batch `micro` is the micro-th of k equal parts of that slice */
        int64_t rows = r->bx->shape[1];
        int64_t at = (r->iter * rows + (r->hooks.rank * r->accum + micro) * r->B) * r->T;
        x = nb_from_data(ctx, NB_I64, NB_SHAPE(r->B, r->T), (int64_t *)r->bx->data + at);
        y = nb_from_data(ctx, NB_I64, NB_SHAPE(r->B, r->T), (int64_t *)r->by->data + at);
    } else if (nb_get_batch(ctx, r->split.train, r->B, r->T, &r->rng_batch, &x, &y)) {
        return NULL;
    }
    return nb_gpt_loss(ctx, &r->gpt, x, y, NULL);
}

/* estimate_loss: the mean loss of the fixed batches of one split, in eval
 * mode with no tape. */
static double eval_split(run *r, int which) {
    int64_t E = r->f->eval_iters, n = r->B * r->T;
    double sum = 0;
    for (int64_t e = 0; e < E; e++) {
        nb_ctx_reset(r->sctx);
        nb_tensor *x = nb_from_data(r->sctx, NB_I64, NB_SHAPE(r->B, r->T),
                                    (int64_t *)r->eval_x[which]->data + e * n);
        nb_tensor *y = nb_from_data(r->sctx, NB_I64, NB_SHAPE(r->B, r->T),
                                    (int64_t *)r->eval_y[which]->data + e * n);
        nb_tensor *logits = nb_gpt_infer(r->sctx, &r->gpt, x);
        sum += nb_item(nb_cross_entropy(r->sctx, logits, y));
        if (nb_ctx_error(r->sctx)) return NAN;
    }
    return sum / (double)E;
}

static int evaluate(run *r, FILE *log) {
    double tl = eval_split(r, 0), vl = eval_split(r, 1);
    if (isnan(tl) || isnan(vl)) return gpt_fail(r->prog, "evaluation: %s", nb_ctx_error(r->sctx));
    if (r->hooks.rank == 0) {
        printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)r->iter, tl, vl);
        fprintf(log, "{\"iter\": %lld, \"train_loss\": %.17g, \"val_loss\": %.17g}\n",
                (long long)r->iter, tl, vl);
        fflush(stdout);
    }
    return 0;
}

/* --diagnostics=PAGE: nb_diag over the run, about 100 records, written at
 * the end as PAGE and PAGE.jsonl. Called after every step (d NULL: off)
 * and once with `end`. */
static int diagnostics(run *r, nb_diag **d, double loss, bool end) {
    const char *page = r->f->diagnostics;
    if (!page[0] || r->hooks.rank != 0) return 0;
    if (!*d) *d = nb_diag_new(r->sctx, (int)(r->max_iters / 100 > 1 ? r->max_iters / 100 : 1), 0);
    if (!*d) return gpt_fail(r->prog, "--diagnostics: %s", nb_ctx_error(r->sctx));
    if (!end) return nb_diag_step(r->sctx, *d, (long)r->iter, loss, &r->gpt.params)
                         ? gpt_fail(r->prog, "--diagnostics: %s", nb_ctx_error(r->sctx)) : 0;
    char jsonl[4096];
    snprintf(jsonl, sizeof jsonl, "%s.jsonl", page);
    FILE *f = fopen(page, "w"), *g = fopen(jsonl, "w");
    nb_status st = f && g ? nb_diag_write_html(r->sctx, *d, f) : NB_ERR_IO;
    if (!st) st = nb_diag_write_jsonl(r->sctx, *d, g);
    if (f && fclose(f) && !st) st = NB_ERR_IO;
    if (g && fclose(g) && !st) st = NB_ERR_IO;
    nb_diag_free(*d);
    *d = NULL;
    return st ? gpt_fail(r->prog, "--diagnostics: cannot write %s or %s", page, jsonl) : 0;
}

static int train_loop(run *r, FILE *log) {
    nb_diag *diag = NULL;
    const gpt_flags *f = r->f;
    nb_train_step step = {.opt = r->opt, .params = &r->gpt.params,
                          .accum_steps = (int)r->accum,
                          .grad_clip = f->grad_clip, .loss_fn = micro_loss, .user = r,
                          .grad_sync = r->hooks.grad_sync, .sync_user = r->hooks.sync_user};
    const gpt_dist *d = r->hooks.dist;
    if (d) step.grad_sync = d->grad_sync, step.sync_user = (void *)d;
    double tokens = (double)(r->B * r->T * r->accum * r->hooks.world);
    for (; r->iter < r->max_iters; r->iter++) {
        if (!r->bx && r->iter % f->eval_interval == 0 && evaluate(r, log)) return GPT_EXIT_USAGE;
        step.lr = nb_lr_at(&r->sched, r->iter);
        nb_gpt_train(&r->gpt, true);
        double t0 = now_ms();
        nb_step_result res;
        if (nb_train_step_run(r->sctx, &step, &res))
            return gpt_fail(r->prog, "iter %lld: %s", (long long)r->iter,
                            nb_ctx_error(r->sctx) ? nb_ctx_error(r->sctx) : "failed");
        if (d && d->mean(d, &res.loss, 1)) return GPT_EXIT_USAGE; /* the global batch's loss */
        if (d && ((r->iter + 1) % f->eval_interval == 0 || r->iter + 1 == r->max_iters) &&
            d->drift(d, &r->gpt.params, (long)r->iter))
            return GPT_EXIT_USAGE;
        double ms = now_ms() - t0;
        if (diagnostics(r, &diag, res.loss, false)) return GPT_EXIT_USAGE;
        if (r->hooks.rank == 0) {
            printf("iter %lld: loss %.4f, time %.2f ms, %.0f tok/s\n", (long long)r->iter,
                   res.loss, ms, tokens / (ms / 1e3));
            fprintf(log, "{\"iter\": %lld, \"loss\": %.17g, \"lr\": %.17g, \"ms\": %.3f}\n",
                    (long long)r->iter, res.loss, step.lr, ms);
            fflush(stdout);
        }
    }
    if (diagnostics(r, &diag, 0, true)) return GPT_EXIT_USAGE;
    if (!r->bx && evaluate(r, log)) return GPT_EXIT_USAGE;
    return 0;
}

/* ---- files ------------------------------------------------------------------ */
static int set_paths(run *r) {
    const char *d = r->f->out_dir;
    int n = snprintf(r->path_log, PATH_LEN, "%s/log.jsonl", d);
    snprintf(r->path_model, PATH_LEN, "%s/model.safetensors", d);
    snprintf(r->path_ckpt, PATH_LEN, "%s/ckpt.safetensors", d);
    snprintf(r->path_svg, PATH_LEN, "%s/loss.svg", d);
    if (n >= PATH_LEN - 16) return gpt_fail(r->prog, "--out_dir: path too long");
    if (r->hooks.rank != 0) return 0;
    if (mkdir(d, 0777) && errno != EEXIST)
        return gpt_fail(r->prog, "--out_dir=%s: %s", d, strerror(errno));
    if (r->f->resume || r->f->force) return 0;
    const char *outs[] = {r->path_log, r->path_model, r->path_ckpt, r->path_svg};
    struct stat st;
    for (int i = 0; i < 4; i++)
        if (stat(outs[i], &st) == 0)
            return gpt_fail(r->prog, "%s exists from an earlier run: pass --resume to continue "
                            "it or --force to start afresh and overwrite it", outs[i]);
    return 0;
}

/* Metadata shared by model.safetensors and ckpt.safetensors. */
typedef struct meta {
    int n;
    const char *k[12], *v[12];
    char buf[8][32];
} meta;

static void meta_add(meta *m, const char *key, const char *value) {
    m->k[m->n] = key, m->v[m->n++] = value;
}

static void meta_fill(run *r, meta *m) {
    const nb_gpt_config *c = &r->gpt.cfg;
    m->n = 0;
    meta_add(m, "arch", c->arch == NB_GPT_NANOGPT ? "nanogpt" : "gptmodel");
    snprintf(m->buf[0], 32, "%d", c->n_head);
    meta_add(m, "n_head", m->buf[0]);
    snprintf(m->buf[1], 32, "%lld", (long long)r->iter);
    meta_add(m, "iter", m->buf[1]);
    snprintf(m->buf[2], 32, "%d", r->hooks.world);
    meta_add(m, "world", m->buf[2]);
    if (r->has_vocab) {
        meta_add(m, "tokenizer", "char");
        meta_add(m, "vocab", nb_char_vocab_to_string(r->pctx, &r->vocab));
    }
}

static nb_tensor_list extra_list(run *r) {
    nb_tensor_list x = {0};
    nb_list_add(&x, "rng_model", nb_pcg32_tensor(r->pctx, &r->rng_model));
    nb_list_add(&x, "rng_batch", nb_pcg32_tensor(r->pctx, &r->rng_batch));
    nb_list_add(&x, "iter", r->iter_t);
    for (int q = 1; r->peers && q < r->hooks.world; q++) { /* names live in pctx */
        char *nm = nb_ctx_alloc(r->pctx, 2 * 40);
        if (!nm) break;
        snprintf(nm, 40, "rng_model.rank%d", q);
        snprintf(nm + 40, 40, "rng_batch.rank%d", q);
        nb_list_add(&x, nm, nb_pcg32_tensor(r->pctx, &r->peers[2 * q]));
        nb_list_add(&x, nm + 40, nb_pcg32_tensor(r->pctx, &r->peers[2 * q + 1]));
    }
    return x;
}

static int save_outputs(run *r) {
    meta m;
    meta_fill(r, &m);
    ((int64_t *)r->iter_t->data)[0] = r->iter;
    nb_tensor_list extra = extra_list(r);
    if (nb_save_safetensors(r->pctx, r->path_model, &r->gpt.state_dict, m.n, m.k, m.v) ||
        nb_save_checkpoint(r->pctx, r->path_ckpt, &r->gpt.params, r->opt, &extra, m.n, m.k, m.v))
        return gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx));
    return gpt_write_loss_svg(r->prog, r->path_log, r->path_svg);
}

/* --resume: the vocabulary from the checkpoint's metadata (before the data
 * is encoded), then, once the model and optimizer exist, their state. */
static int resume_vocab(run *r) {
    const char *keys[16], *values[16];
    int n = 0;
    nb_tensor_list l = {0};
    nb_ctx *tmp = nb_ctx_new(0);
    nb_status st = nb_load_safetensors_meta(tmp, r->path_ckpt, &l, 16, &n, keys, values);
    if (st) {
        gpt_fail(r->prog, "--resume: %s", nb_ctx_error(tmp));
        nb_ctx_free(tmp);
        return GPT_EXIT_USAGE;
    }
    vocab_from_meta(r, n < 16 ? n : 16, keys, values);
    int world = 1;
    for (int i = 0; i < n && i < 16; i++)
        if (!strcmp(keys[i], "world")) world = atoi(values[i]);
    nb_list_free(&l);
    nb_ctx_free(tmp);
    if (world != r->hooks.world)
        return gpt_fail(r->prog, "--resume: %s was saved by %d process(es) and this run has %d; "
                        "resume with the same rank count", r->path_ckpt, world, r->hooks.world);
    return 0;
}

static int resume_state(run *r) {
    nb_tensor_list extra = extra_list(r);
    if (nb_load_checkpoint(r->pctx, r->path_ckpt, &r->gpt.params, r->opt, &extra))
        return gpt_fail(r->prog, "--resume: %s", nb_ctx_error(r->pctx));
    r->iter = ((int64_t *)r->iter_t->data)[0];
    if (r->peers && r->hooks.rank > 0) { /* this rank's generators, saved by rank 0 */
        r->rng_model = r->peers[2 * r->hooks.rank];
        r->rng_batch = r->peers[2 * r->hooks.rank + 1];
    }
    return 0;
}

/* The log of the run resumed: lines of iterations before `iter` are kept
 * (a later final evaluation is redone), then appended to. */
static FILE *open_log(run *r) {
    if (r->hooks.rank != 0) return fopen("/dev/null", "w");
    if (!r->f->resume) return fopen(r->path_log, "w");
    size_t len;
    char *old = gpt_read_file(r->prog, r->path_log, &len);
    FILE *log = old ? fopen(r->path_log, "w") : NULL;
    for (char *line = old, *nl; log && line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        long long it = -1;
        if (sscanf(line, "{\"iter\": %lld", &it) == 1 && it < r->iter)
            fprintf(log, "%.*s\n", nl ? (int)(nl - line) : (int)strlen(line), line);
    }
    free(old);
    return log;
}

/* ---- the whole run ------------------------------------------------------- */
static int setup(run *r) {
    const gpt_flags *f = r->f;
    int st = set_paths(r);
    if (st) return st;
    if (!f->data[0] == !f->batches[0])
        return gpt_fail(r->prog, "train needs exactly one of --data=FILE and --batches=FILE");
    /* Rank 0 draws the init (the other ranks take it by broadcast) and every
     * rank its own dropout masks: stream 1 on rank 0, 1000 + r on rank r. */
    nb_pcg32_seed(&r->rng_model, (uint64_t)f->seed,
                  r->hooks.rank ? 1000 + (uint64_t)r->hooks.rank : 1);
    if (r->hooks.world > 1 && !(r->peers = calloc(2 * (size_t)r->hooks.world, sizeof *r->peers)))
        return gpt_fail(r->prog, "out of memory");
    nb_pcg32_seed(&r->rng_batch, (uint64_t)f->seed + (uint64_t)r->hooks.rank, 2);
    r->B = f->batch_size, r->T = f->block_size, r->max_iters = f->max_iters;
    /* gradient_accumulation_steps counts micro-batches of the whole run, as
     * nanoGPT's train.py: over W ranks each does k / W of them when W
     * divides k. Otherwise each rank does all k (in text mode the global
     * batch is then W times larger; --batches splits every micro-batch's
     * rows over the ranks instead). */
    int64_t k = f->gradient_accumulation_steps, W = r->hooks.world;
    r->accum = k % W ? k : k / W;
    if (f->batches[0] && !gpt_flag_given(f, "max_iters")) r->max_iters = 0; /* N */
    if (f->resume && (st = resume_vocab(r))) return st;
    if (f->batches[0] && (st = load_batches(r))) return st;
    if (f->init[0] && f->data[0]) { /* the init's vocabulary encodes the text */
        if ((st = build_model(r))) return st;
        if ((st = load_text(r))) return st;
    } else {
        if (f->data[0] && (st = load_text(r))) return st;
        if ((st = build_model(r))) return st;
    }
    if (r->has_vocab && r->vocab.size != r->gpt.cfg.vocab_size)
        return gpt_fail(r->prog, "the text has %d characters but the model's vocabulary is %lld",
                        r->vocab.size, (long long)r->gpt.cfg.vocab_size);
    if (r->T > r->gpt.cfg.block_size)
        return gpt_fail(r->prog, "batches of %lld tokens exceed the model's block_size %lld",
                        (long long)r->T, (long long)r->gpt.cfg.block_size);
    if (r->bx && (st = check_batch_ids(r))) return st;
    nb_adam_opts o = nb_adamw_defaults(f->learning_rate);
    o.beta1 = f->beta1, o.beta2 = f->beta2, o.weight_decay = f->weight_decay;
    r->opt = nb_adamw_new_groups(r->pctx, &r->gpt.params, o, f->weight_decay_1d);
    if (!r->opt) return gpt_fail(r->prog, "AdamW: %s", nb_ctx_error(r->pctx));
    r->sched = (nb_lr_schedule){f->learning_rate, f->decay_lr, f->warmup_iters,
                                f->lr_decay_iters ? f->lr_decay_iters : r->max_iters, f->min_lr};
    r->iter_t = nb_scalar(r->pctx, NB_I64, 0);
    return f->resume ? resume_state(r) : 0;
}

/* ---- data parallel (hooks.dist) -------------------------------------------- */
/* After setup: every rank learns whether any rank failed (one rank's bad file
 * stops all), then rank 0's parameters are everyone's. */
static int dist_start(run *r) {
    const gpt_dist *d = r->hooks.dist;
    char msg[512] = "";
    if (d->agree(d, 0, msg, sizeof msg)) return gpt_fail(r->prog, "%s", msg);
    return d->bcast(d, &r->gpt.params);
}

/* The run's end on every rank: a rank that failed tells the others (they
 * meet it in their next collective call, or here), and rank 0's saves
 * succeeded or not for everyone. */
static int dist_finish(run *r, int st) {
    const gpt_dist *d = r->hooks.dist;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", st ? gpt_last_error() : "");
    if (d->agree(d, st != 0, msg, sizeof msg) && !st) st = gpt_fail(r->prog, "%s", msg);
    return st;
}

int gpt_train_run(const gpt_flags *f, const char *prog, const gpt_train_hooks *hooks) {
    run *r = calloc(1, sizeof *r);
    if (!r) return gpt_fail(prog, "out of memory");
    r->f = f, r->prog = prog;
    r->hooks = hooks ? *hooks : (gpt_train_hooks){.world = 1};
    if (r->hooks.dist) r->hooks.rank = r->hooks.dist->rank, r->hooks.world = r->hooks.dist->world;
    if (r->hooks.world < 1) r->hooks.world = 1;
    nb_set_num_threads((int)f->threads);
    r->pctx = nb_ctx_new(0), r->sctx = nb_ctx_new(0);
    int st = r->pctx && r->sctx ? setup(r) : gpt_fail(prog, "out of memory");
    FILE *log = st ? NULL : open_log(r);
    if (!st && !log) st = gpt_fail(prog, "%s: %s", r->path_log, strerror(errno));
    if (!st && r->hooks.rank == 0) {
        printf("%s: %s, %lld parameters, vocab %lld, %lld iterations from %lld\n", prog,
               r->gpt.cfg.arch == NB_GPT_NANOGPT ? "nanogpt" : "gptmodel",
               (long long)nb_gpt_num_params(&r->gpt, false), (long long)r->gpt.cfg.vocab_size,
               (long long)r->max_iters, (long long)r->iter);
        fflush(stdout);
    }
    const gpt_dist *d = r->hooks.dist;
    if (!st && d) st = dist_start(r);
    if (!st) st = train_loop(r, log);
    if (log && fclose(log) && !st) st = gpt_fail(prog, "%s: write failed", r->path_log);
    if (!st && d && r->peers)
        st = d->gather(d, (nb_pcg32[2]){r->rng_model, r->rng_batch}, 2 * sizeof(nb_pcg32), r->peers);
    if (!st && r->hooks.rank == 0) st = save_outputs(r);
    if (d) st = dist_finish(r, st);
    free(r->peers);
    nb_optim_free(r->opt);
    nb_gpt_free(&r->gpt);
    nb_ctx_free(r->sctx), nb_ctx_free(r->pctx);
    free(r);
    return st;
}
