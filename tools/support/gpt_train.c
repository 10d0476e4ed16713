/* gpt_train.c - the training loop of `nabla-gpt train`: data (text, a
 * nanoGPT dataset or replayed batches), the model (fresh, --init_from=PATH
 * or resumed), nanoGPT's loop (evaluate and checkpoint, get_lr, accumulate,
 * clip, AdamW), progress, log.jsonl and the output files.
 *
 * Nothing is lost: a checkpoint at every evaluation (when the val loss
 * improved, or always with --always_save_checkpoint=True) and at the end,
 * each written atomically; SIGINT/SIGTERM finish the step, save and exit
 * 130/143 (a second signal exits at once, saying so, and removes the
 * temporary file of a save it cut; a later start removes any that a kill
 * left); log.jsonl gets whole lines only,
 * each with the run's id; a non-finite loss or gradient stops the run before
 * the update, exit 1, the last checkpoint untouched. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gpt_data.h"
#include "gpt_optim.h"
#include "gpt_train.h"
#include "gpt_svg.h"
#include "now.h"

#define EXIT_INTERNAL 1
#define PATH_LEN 4096

typedef struct run {
    gpt_flags fl;          /* the flags, completed from the checkpoint on resume */
    const gpt_flags *f;    /* &fl */
    bool resume;           /* --resume or --init_from=resume */
    const char *init;      /* --init or --init_from=PATH, else "" */
    char run_id[40];       /* this run's id (kept on resume) */
    double best_val;       /* nanoGPT's best_val_loss */
    nb_tensor *best_t;     /* F64 scalar of it, for the checkpoint */
    int64_t ckpt_iter;     /* the iteration of the checkpoint on disk, -1 for none */
    int log_fd;            /* log.jsonl, appended whole lines; -1 off rank 0 */
    double bad_loss;       /* a non-finite micro-batch loss of this step, else 0 */
    const char *bad_param; /* the first parameter with a non-finite gradient */
    gpt_dataset ds;        /* --dataset */
    bool has_ds;
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
    /* --max_time: seconds of training before this process (the checkpoint's),
     * the run's clock when its warmup ended (-1: not yet), and now (every
     * rank's mean after each step, so all stop at the same step) */
    double t_base, t_warm, t_now;
    nb_diag **diag;        /* --diagnostics: the run's (made at first use), else NULL */
    /* text mode */
    nb_char_vocab vocab;
    bool has_vocab;
    nb_token_split split;  /* --data */
    nb_tensor *eval_x[2], *eval_y[2]; /* I64 (eval_iters, B, T) per split, fixed */
    /* --batches mode */
    nb_tensor *bx, *by;    /* I64 (N, B, T) */
    int64_t B, T, max_iters, iter, V; /* V: the data's vocabulary size */
    char batch_err[300];
    /* what every save reuses (a save at each evaluation must not grow pctx) */
    const char *vocab_str;
    nb_tensor_list extra;
    bool has_extra;
    char flag_key[56][64], flag_val[56][PATH_LEN];
    char path_log[PATH_LEN], path_model[PATH_LEN], path_ckpt[PATH_LEN], path_svg[PATH_LEN];
    char path_diag_jsonl[PATH_LEN]; /* --diagnostics=PAGE's PAGE.jsonl */
} run;

/* ---- signals: the step finishes, then the run saves and exits ------------- */
static volatile sig_atomic_t g_signal; /* the first SIGINT/SIGTERM, 0 before */

/* What a second signal says and the temporary files it removes (a save's
 * "<path>.tmp.<pid>"), prepared beforehand: a handler may only write(2),
 * unlink(2) and _exit(2). */
static char g_second_msg[2 * PATH_LEN + 400];
static size_t g_second_len;
enum { TMP_MODEL, TMP_CKPT, TMP_PAGE, TMP_PAGE_JSONL, N_TMP };
static char g_tmp[N_TMP][PATH_LEN + 32];

static void on_signal(int sig) {
    if (!g_signal) {
        g_signal = sig;
        return;
    }
    for (int i = 0; i < N_TMP; i++) /* a second one: at once (the old checkpoint stays) */
        if (g_tmp[i][0]) unlink(g_tmp[i]);
    ssize_t w = write(STDERR_FILENO, g_second_msg, g_second_len);
    (void)w;
    _exit(128 + sig);
}

/* The second signal's message for the checkpoint now on disk. */
static void set_second_msg(const char *prog, const char *out_dir, const char *ckpt, int64_t iter) {
    if (iter < 0)
        snprintf(g_second_msg, sizeof g_second_msg, "%s: a second signal: stopped at once, "
                 "without saving; no checkpoint had been written, so there is nothing to "
                 "resume: start again with --force\n", prog);
    else
        snprintf(g_second_msg, sizeof g_second_msg, "%s: a second signal: stopped at once, "
                 "without saving; %s (iteration %lld) is kept: resume with: %s train "
                 "--out_dir=%s --init_from=resume\n", prog, ckpt, (long long)iter, prog, out_dir);
    g_second_len = strlen(g_second_msg);
}

static void catch_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

/* Test seam: NB_GPT_TEST_STEP_SECONDS="S" makes each step take S seconds
 * of --max_time's clock, whatever the wall clock says. */
static double test_step_seconds(void) {
    const char *v = getenv("NB_GPT_TEST_STEP_SECONDS");
    return v && *v ? atof(v) : 0;
}

/* Test seam (tests/check_gpt_tool.c): NB_GPT_TEST_SIGNAL="N" sends this
 * process SIGINT during iteration N's step; "N:TERM" SIGTERM; "N:TWICE"
 * SIGINT there and again while the checkpoint is being saved (its
 * temporary file half written). */
static long test_signal_at(const char **how) {
    const char *v = getenv("NB_GPT_TEST_SIGNAL");
    *how = v && strchr(v, ':') ? strchr(v, ':') + 1 : "";
    return v && *v ? atol(v) : -1;
}

/* A number for JSON: null when not finite (JSON has no NaN or inf). */
static const char *jnum(char *buf, double v) {
    if (isfinite(v)) snprintf(buf, 32, "%.17g", v);
    else snprintf(buf, 32, "null");
    return buf;
}

/* Appends one whole line (one write) to log.jsonl. */
static int log_line(run *r, const char *fmt, ...) NB_PRINTF_LIKE(2, 3);
static int log_line(run *r, const char *fmt, ...) {
    if (r->log_fd < 0) return 0;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 40, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof line - 40) return gpt_fail(r->prog, "log line too long");
    n += snprintf(line + n, sizeof line - (size_t)n, ", \"run\": \"%s\"}\n", r->run_id);
    if (write(r->log_fd, line, (size_t)n) != n)
        return gpt_fail(r->prog, "%s: write failed: %s", r->path_log, strerror(errno));
    return 0;
}

/* ---- data: text --------------------------------------------------------- */

/* The vocabulary stored in a model or checkpoint file's metadata, if any. */
static bool vocab_from_meta(run *r, int n, const char **keys, const char **values) {
    for (int i = 0; i < n; i++)
        if (!strcmp(keys[i], "vocab") && !nb_char_vocab_from_string(r->pctx, values[i], &r->vocab))
            return r->has_vocab = true;
    return false;
}

/* nanoGPT's get_batch from split `which` (0 train, 1 val) of the text or
 * the dataset. 0, or -1 with the message on ctx or in r->batch_err. */
static int split_batch(run *r, nb_ctx *ctx, int which, nb_pcg32 *rng, nb_tensor **x,
                       nb_tensor **y) {
    r->batch_err[0] = '\0';
    if (r->has_ds)
        return gpt_tokens_batch(ctx, which ? &r->ds.val : &r->ds.train, r->V, r->B, r->T, rng, x,
                                y, r->batch_err, sizeof r->batch_err);
    return nb_get_batch(ctx, which ? r->split.val : r->split.train, r->B, r->T, rng, x, y) ? -1 : 0;
}

static const char *batch_error(run *r, nb_ctx *ctx) {
    return r->batch_err[0] ? r->batch_err : nb_ctx_error(ctx) ? nb_ctx_error(ctx) : "failed";
}

/* eval_iters fixed batches of one split, drawn once from their own stream. */
static int draw_eval_batches(run *r, int which) {
    int64_t E = r->f->eval_iters, n = r->B * r->T;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)r->f->seed, 4 + (uint64_t)which);
    r->eval_x[which] = nb_empty(r->pctx, NB_I64, NB_SHAPE(E, r->B, r->T));
    r->eval_y[which] = nb_empty(r->pctx, NB_I64, NB_SHAPE(E, r->B, r->T));
    for (int64_t e = 0; e < E && !nb_ctx_error(r->pctx); e++) {
        nb_tensor *x, *y;
        nb_ctx_reset(r->sctx);
        if (split_batch(r, r->sctx, which, &rng, &x, &y))
            return gpt_fail(r->prog, "%s %s: %s", r->has_ds ? r->ds.dir : r->f->data,
                            which ? "val" : "train", batch_error(r, r->sctx));
        memcpy((int64_t *)r->eval_x[which]->data + e * n, x->data, (size_t)n * 8);
        memcpy((int64_t *)r->eval_y[which]->data + e * n, y->data, (size_t)n * 8);
    }
    return nb_ctx_error(r->pctx) ? gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx)) : 0;
}

/* --dataset: nanoGPT's train.bin/val.bin (mapped) and meta.pkl's vocabulary;
 * without meta.pkl, GPT-2's ids and nanoGPT's vocab_size 50304. */
static int load_dataset(run *r) {
    int st = gpt_dataset_open(r->prog, r->f->dataset, &r->ds);
    if (st) return st;
    r->has_ds = true;
    if (r->ds.has_meta) {
        uint32_t *cp = nb_ctx_alloc(r->pctx, (size_t)r->ds.meta.vocab_size * sizeof *cp);
        if (!cp) return gpt_fail(r->prog, "out of memory");
        memcpy(cp, r->ds.meta.itos, (size_t)r->ds.meta.vocab_size * sizeof *cp);
        nb_char_vocab v = {r->ds.meta.vocab_size, cp};
        if (r->has_vocab && (r->vocab.size != v.size ||
                             memcmp(r->vocab.chars, v.chars, (size_t)v.size * sizeof *cp)))
            return gpt_fail(r->prog, "--dataset=%s: its meta.pkl vocabulary is not the "
                            "checkpoint's", r->f->dataset);
        r->vocab = v, r->has_vocab = true, r->V = v.size;
    } else {
        r->V = 50304;
        printf("%s: %s has no meta.pkl: GPT-2 token ids, vocab_size 50304 (as nanoGPT)\n",
               r->prog, r->ds.dir);
    }
    st = r->f->eval_train ? draw_eval_batches(r, 0) : 0;
    return st ? st : draw_eval_batches(r, 1);
}

/* --data's text is held in memory with 8 bytes of id per character, so its
 * size is capped; larger data goes through prepare and --dataset (mapped). */
#define TEXT_MAX ((off_t)256 << 20)

static int load_text(run *r) {
    size_t len;
    struct stat sb;
    if (stat(r->f->data, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size > TEXT_MAX)
        return gpt_fail(r->prog, "--data=%s: %lld MiB of text: over --data's 256 MiB (it keeps "
                        "8 bytes a character in memory); run '%s prepare --data=%s "
                        "--out_dir=DIR' and train with --dataset=DIR, which memory-maps the ids",
                        r->f->data, (long long)(sb.st_size >> 20), r->prog, r->f->data);
    char *text = gpt_read_file(r->prog, r->f->data, &len);
    if (!text) return GPT_EXIT_USAGE;
    nb_tensor *ids = NULL;
    if (r->has_vocab || !nb_char_vocab_build(r->pctx, text, len, &r->vocab))
        ids = nb_char_encode(r->pctx, &r->vocab, text, len);
    free(text);
    if (!ids) return gpt_fail(r->prog, "--data=%s: %s", r->f->data, nb_ctx_error(r->pctx));
    r->has_vocab = true, r->V = r->vocab.size;
    r->split = nb_token_split_90_10(r->pctx, ids);
    int64_t n = ids->shape[0], need = r->T + 1;
    int64_t n_val = r->split.val ? r->split.val->shape[0] : 0;
    if (!r->split.train || r->split.train->shape[0] < need || n_val < need)
        return gpt_fail(r->prog,
                        "--data=%s: %lld characters are too few: the 90%% train and 10%% val "
                        "parts need at least block_size + 1 = %lld characters each (the "
                        "text needs %lld); use a longer text or a smaller --block_size",
                        r->f->data, (long long)n, (long long)need, (long long)(10 * need));
    int st = r->f->eval_train ? draw_eval_batches(r, 0) : 0;
    return st ? st : draw_eval_batches(r, 1);
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

/* Every id of --dataset's train.bin and val.bin must be a row of the
 * model's embedding: checked before the first step, so a model made for
 * another tokenizer (a smaller vocabulary) is refused before anything is
 * written. One pass over the mapped ids; a vocabulary of 65536 or more
 * holds every uint16. */
static int check_dataset_ids(run *r) {
    int64_t V = r->gpt.cfg.vocab_size;
    if (V >= 65536) return 0;
    for (int w = 0; w < 2; w++) {
        const gpt_tokens *t = w ? &r->ds.val : &r->ds.train;
        unsigned top = 0;
        int64_t at = 0;
        for (int64_t i = 0; i < t->n; i++) {
            unsigned id = t->u16[2 * i] | (unsigned)t->u16[2 * i + 1] << 8;
            if (id > top) top = id, at = i;
        }
        if ((int64_t)top >= V)
            return gpt_fail(r->prog, "--dataset=%s: %s holds token id %u (at index %lld), but "
                            "the model's vocabulary is %lld (ids 0..%lld)%s%s: the model was not "
                            "made for this data's tokenizer. Nothing was written.", r->f->dataset,
                            w ? "val.bin" : "train.bin", top, (long long)at, (long long)V,
                            (long long)V - 1, r->init[0] ? "; --init_from=" : "", r->init);
    }
    return 0;
}

/* ---- the model ------------------------------------------------------------ */
/* Whether a config.json or cfg.json sits beside the model file `path`. */
static bool has_config(const char *path) {
    const char *slash = strrchr(path, '/');
    int dir = slash ? (int)(slash - path) + 1 : 0;
    char p[PATH_LEN + 16];
    snprintf(p, sizeof p, "%.*sconfig.json", dir, path);
    if (access(p, F_OK) == 0) return true;
    snprintf(p, sizeof p, "%.*scfg.json", dir, path);
    return access(p, F_OK) == 0;
}

/* --init_from=PATH (or --init): the model from a safetensors state_dict,
 * either layout, through the library; its vocabulary from the metadata. A
 * model directory (a config.json or the course's cfg.json beside the file:
 * any family, as nb_gpt_save and `nabla-gpt init` write them) is built by
 * nb_gpt_load from its config; GPT-2's Hugging Face files by
 * nb_gpt_load_hf; anything else is a state_dict of nanoGPT's or GPTModel's
 * names with --n_head.
 * The one place a model comes from a file other than the run's checkpoint
 * (a GPT-2 checkpoint reader would hook in here). */
static int model_from_init(run *r) {
    const char *keys[64], *values[64];
    int n_meta = 0;
    nb_tensor_list sd = {0};
    if (nb_load_safetensors_meta(r->pctx, r->init, &sd, 64, &n_meta, keys, values))
        return gpt_fail(r->prog, "--init_from: %s", nb_ctx_error(r->pctx));
    vocab_from_meta(r, n_meta < 64 ? n_meta : 64, keys, values);
    nb_status st;
    bool dir = has_config(r->init); /* a model directory: its config says what to build */
    if (dir && !nb_gpt_state_dict_is_hf(&sd)) {
        nb_list_free(&sd);
        st = nb_gpt_load(r->pctx, &r->gpt, r->init, r->f->dropout, gpt_flags_dtype(r->f),
                         &r->rng_model);
    } else if (nb_gpt_state_dict_is_hf(&sd)) { /* Hugging Face's GPT-2, read again, streamed */
        nb_list_free(&sd);
        int heads = gpt_flag_given(r->f, "n_head") ? (int)r->f->n_head : 0; /* 0: config.json */
        st = nb_gpt_load_hf(r->pctx, &r->gpt, r->init, heads, r->f->dropout,
                            gpt_flags_dtype(r->f), &r->rng_model);
    } else {
        st = nb_gpt_from_state_dict(r->pctx, &r->gpt, &sd, (int)r->f->n_head, r->f->dropout,
                                    gpt_flags_dtype(r->f), &r->rng_model);
        for (int i = 0; !st && i < n_meta && i < 64; i++) /* a model started from GPT-2's */
            if (!strcmp(keys[i], "gelu") && !strcmp(values[i], "tanh")) r->gpt.cfg.gelu = NB_GELU_TANH;
        nb_list_free(&sd);
    }
    return st ? gpt_fail(r->prog, "--init_from=%s: %s", r->init, nb_ctx_error(r->pctx)) : 0;
}

static int model_from_flags(run *r) {
    int64_t V = r->has_vocab ? r->vocab.size : r->has_ds ? r->V : r->f->vocab_size;
    if (V < 1)
        return gpt_fail(r->prog, "--batches without --init needs --vocab_size");
    nb_gpt_config c = gpt_flags_model(r->f, V);
    if (nb_gpt_init(r->pctx, &r->gpt, &c, &r->rng_model))
        return gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx));
    return 0;
}

/* The model, from --init_from or from the flags. --diagnostics runs a
 * mixture's experts one module each, so that the page names each expert. */
static int build_model(run *r) {
    int st = r->init[0] ? model_from_init(r) : model_from_flags(r);
    r->gpt.expert_modules = r->f->diagnostics[0] != 0;
    return st;
}

/* ---- one step ------------------------------------------------------------ */
static nb_tensor *micro_loss(nb_ctx *ctx, int micro, void *user) {
    run *r = user;
    nb_tensor *x, *y;
    const char *how;
    if (micro == 0 && r->iter == test_signal_at(&how))
        raise(strcmp(how, "TERM") ? SIGINT : SIGTERM);
    if (r->bx) { /* a batch's rows: rank r takes the r-th of `world` equal slices, and its
                    micro-batch `micro` is the micro-th of k equal parts of that slice */
        int64_t rows = r->bx->shape[1];
        int64_t at = (r->iter * rows + (r->hooks.rank * r->accum + micro) * r->B) * r->T;
        x = nb_from_data(ctx, NB_I64, NB_SHAPE(r->B, r->T), (int64_t *)r->bx->data + at);
        y = nb_from_data(ctx, NB_I64, NB_SHAPE(r->B, r->T), (int64_t *)r->by->data + at);
    } else if (split_batch(r, ctx, 0, &r->rng_batch, &x, &y)) {
        return NULL;
    }
    nb_tensor *loss = nb_gpt_loss(ctx, &r->gpt, x, y, NULL);
    double v = loss ? nb_item(loss) : 0;
    if (loss && !isfinite(v) && r->bad_loss == 0) r->bad_loss = isnan(v) ? NAN : v;
    return loss;
}

/* The grad_sync hook: the driver's sync (MPI), then every gradient must be
 * finite and so must the loss, or the step stops before the update. */
static nb_status check_step(const nb_tensor_list *params, void *user) {
    run *r = user;
    const gpt_dist *d = r->hooks.dist;
    nb_grad_sync_fn inner = d ? d->grad_sync : r->hooks.grad_sync;
    void *iu = d ? (void *)d : r->hooks.sync_user;
    if (inner) {
        nb_status st = inner(params, iu);
        if (st) return st;
    }
    if (r->bad_loss != 0) return NB_ERR_VALUE;
    for (int i = 0; i < params->n; i++) {
        const nb_tensor *t = nb_list_tensor(params, i);
        bool ok = true;
        if (!t->grad) continue;
        if (t->dtype == NB_F32)
            for (size_t k = 0; k < t->numel && ok; k++) ok = isfinite(((const float *)t->grad)[k]);
        else if (t->dtype == NB_F64)
            for (size_t k = 0; k < t->numel && ok; k++) ok = isfinite(((const double *)t->grad)[k]);
        if (!ok) {
            r->bad_param = nb_list_name(params, i);
            return NB_ERR_VALUE;
        }
    }
    return NB_OK;
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

/* Token i of the val split, from the mapped val.bin or the text's last 10%. */
static int64_t val_token(const run *r, int64_t i) {
    if (r->has_ds) return (int64_t)r->ds.val.u16[2 * i] | (int64_t)r->ds.val.u16[2 * i + 1] << 8;
    return ((const int64_t *)r->split.val->data)[i];
}

/* --eval_full: the mean loss of every prediction of the val split, cut into
 * floor((n - 1) / T) non-overlapping windows of T tokens (window w reads
 * tokens [wT, wT + T) and predicts [wT + 1, wT + T + 1)), B windows a
 * forward; the last (n - 1) mod T predictions are left out. *windows gets W. */
static double eval_val_full(run *r, int64_t *windows) {
    int64_t n = r->has_ds ? r->ds.val.n : r->split.val->shape[0], T = r->T;
    int64_t W = (n - 1) / T;
    double sum = 0;
    *windows = W;
    for (int64_t w0 = 0; w0 < W; w0 += r->B) {
        int64_t b = W - w0 < r->B ? W - w0 : r->B;
        nb_ctx_reset(r->sctx);
        nb_tensor *x = nb_empty(r->sctx, NB_I64, NB_SHAPE(b, T));
        nb_tensor *y = nb_empty(r->sctx, NB_I64, NB_SHAPE(b, T));
        if (!x || !y) return NAN;
        for (int64_t k = 0; k < b * T; k++) { /* windows are consecutive: token w0 T + k */
            ((int64_t *)x->data)[k] = val_token(r, w0 * T + k);
            ((int64_t *)y->data)[k] = val_token(r, w0 * T + k + 1);
        }
        nb_tensor *logits = nb_gpt_infer(r->sctx, &r->gpt, x);
        sum += nb_item(nb_cross_entropy(r->sctx, logits, y)) * (double)b;
        if (nb_ctx_error(r->sctx)) return NAN;
    }
    return sum / (double)W;
}

/* What to say after a stop: the checkpoint that stays. */
static const char *last_good(run *r, char *buf, size_t n) {
    if (r->ckpt_iter < 0) snprintf(buf, n, "no checkpoint was written before it");
    else snprintf(buf, n, "the last good checkpoint, %s (iteration %lld), is kept", r->path_ckpt,
                  (long long)r->ckpt_iter);
    return buf;
}

static int save_outputs(run *r);
static int diagnostics_eval(run *r, double tl, double vl);

/* An evaluation (nanoGPT's: print, log, and a checkpoint when the val loss
 * improved or always_save_checkpoint; none at iteration 0). */
static int evaluate(run *r, bool final) {
    /* --eval_train=False: the val split alone (tl NaN: null in the log) */
    double tl = r->f->eval_train ? eval_split(r, 0) : NAN, vl = eval_split(r, 1);
    char a[32], b[32], why[PATH_LEN + 80];
    if (nb_ctx_error(r->sctx)) {
        gpt_fail(r->prog, "evaluation at step %lld: %s", (long long)r->iter, nb_ctx_error(r->sctx));
        return EXIT_INTERNAL;
    }
    int64_t windows = 0;
    double fl = final && r->f->eval_full ? eval_val_full(r, &windows) : NAN;
    if (nb_ctx_error(r->sctx)) {
        gpt_fail(r->prog, "--eval_full at step %lld: %s", (long long)r->iter, nb_ctx_error(r->sctx));
        return EXIT_INTERNAL;
    }
    if (r->hooks.rank == 0) {
        if (r->f->eval_train)
            printf("step %lld: train loss %.4f, val loss %.4f\n", (long long)r->iter, tl, vl);
        else
            printf("step %lld: val loss %.4f\n", (long long)r->iter, vl);
        if (windows)
            printf("step %lld: val loss over the whole split %.4f (%lld windows of %lld tokens)\n",
                   (long long)r->iter, fl, (long long)windows, (long long)r->T);
        fflush(stdout);
        char c[32], full[80] = "";
        if (windows) snprintf(full, sizeof full, ", \"val_full_loss\": %s", jnum(c, fl));
        if (log_line(r, "{\"iter\": %lld, \"train_loss\": %s, \"val_loss\": %s%s",
                     (long long)r->iter, jnum(a, tl), jnum(b, vl), full))
            return EXIT_INTERNAL;
        if (diagnostics_eval(r, tl, vl)) return GPT_EXIT_USAGE;
    }
    bool bad_train = r->f->eval_train && !isfinite(tl);
    if (bad_train || !isfinite(vl)) {
        gpt_fail(r->prog, "step %lld: the %s loss is %g, not finite: training stopped; %s",
                 (long long)r->iter, bad_train ? "train" : "val", bad_train ? tl : vl,
                 last_good(r, why, sizeof why));
        return EXIT_INTERNAL;
    }
    bool save = !final && r->iter > 0 && (vl < r->best_val || r->f->always_save_checkpoint);
    if (vl < r->best_val || r->f->always_save_checkpoint) r->best_val = vl;
    const gpt_dist *d = r->hooks.dist;
    if (save && d && r->peers &&
        d->gather(d, (nb_pcg32[2]){r->rng_model, r->rng_batch}, 2 * sizeof(nb_pcg32), r->peers))
        return GPT_EXIT_USAGE;
    if (save && r->hooks.rank == 0) {
        int st = save_outputs(r);
        if (st) return st;
        printf("saving checkpoint to %s\n", r->f->out_dir);
    }
    return 0;
}

/* --diagnostics=PAGE: nb_diag over the run, about 100 records, written at
 * the end as PAGE and PAGE.jsonl. Called after every step (d NULL: off)
 * and once with `end`. */
static int diagnostics_new(run *r, nb_diag **d) {
    if (!*d) *d = nb_diag_new(r->sctx, (int)(r->max_iters / 100 > 1 ? r->max_iters / 100 : 1), 0);
    return *d ? 0 : gpt_fail(r->prog, "--diagnostics: %s", nb_ctx_error(r->sctx));
}

/* An evaluation's losses, for the page's val loss line. */
static int diagnostics_eval(run *r, double tl, double vl) {
    if (!r->f->diagnostics[0] || !r->diag || r->hooks.rank != 0) return 0;
    if (diagnostics_new(r, r->diag)) return 1;
    return nb_diag_eval(r->sctx, *r->diag, (long)r->iter, tl, vl)
               ? gpt_fail(r->prog, "--diagnostics: %s", nb_ctx_error(r->sctx)) : 0;
}

static int diagnostics(run *r, nb_diag **d, double loss, bool end) {
    const char *page = r->f->diagnostics;
    if (!page[0] || r->hooks.rank != 0) return 0;
    if (diagnostics_new(r, d)) return 1;
    if (!end) return nb_diag_step(r->sctx, *d, (long)r->iter, loss, &r->gpt.params)
                         ? gpt_fail(r->prog, "--diagnostics: %s", nb_ctx_error(r->sctx)) : 0;
    const char *jsonl = r->path_diag_jsonl; /* each to a temporary file, then renamed */
    char *tp = g_tmp[TMP_PAGE], *tj = g_tmp[TMP_PAGE_JSONL];
    snprintf(tp, sizeof g_tmp[0], "%s.tmp.%ld", page, (long)getpid());
    snprintf(tj, sizeof g_tmp[0], "%s.tmp.%ld", jsonl, (long)getpid());
    FILE *f = fopen(tp, "w"), *g = fopen(tj, "w");
    nb_status st = f && g ? nb_diag_write_html(r->sctx, *d, f) : NB_ERR_IO;
    if (!st) st = nb_diag_write_jsonl(r->sctx, *d, g);
    if (f && fclose(f) && !st) st = NB_ERR_IO;
    if (g && fclose(g) && !st) st = NB_ERR_IO;
    if (!st && (rename(tj, jsonl) || rename(tp, page))) st = NB_ERR_IO;
    int err = st ? errno : 0;
    unlink(tp), unlink(tj), tp[0] = tj[0] = '\0';
    nb_diag_free(*d);
    *d = NULL;
    return st ? gpt_fail(r->prog, "--diagnostics: cannot write %s or %s: %s (the model and the "
                         "checkpoint were saved)", page, jsonl, err ? strerror(err)
                         : nb_ctx_error(r->sctx) ? nb_ctx_error(r->sctx) : "write failed") : 0;
}

/* After a step whose loss or a gradient was not finite: the message, a log
 * line with null, exit 1. */
static int diverged(run *r, const nb_step_result *res, double lr) {
    char a[32], b[32], why[PATH_LEN + 80], what[300];
    if (r->bad_loss != 0)
        snprintf(what, sizeof what, "the loss is %g", r->bad_loss);
    else if (r->bad_param)
        snprintf(what, sizeof what, "the gradient of %s is not finite", r->bad_param);
    else
        snprintf(what, sizeof what, "the gradient norm is %g", res->grad_norm);
    log_line(r, "{\"iter\": %lld, \"loss\": %s, \"lr\": %s, \"ms\": null", (long long)r->iter,
             jnum(a, r->bad_loss != 0 ? r->bad_loss : res->loss), jnum(b, lr));
    gpt_fail(r->prog, "iter %lld: %s: training stopped (the learning rate was %g; "
             "--anomaly=True names the op that made it); %s", (long long)r->iter, what, lr,
             last_good(r, why, sizeof why));
    return EXIT_INTERNAL;
}

/* SIGINT/SIGTERM arrived: the step is done; save, say how to go on. */
static int interrupted(run *r) {
    int sig = g_signal;
    r->iter++; /* the checkpoint resumes at the next iteration */
    int st = save_outputs(r);
    if (st) return st;
    fprintf(stderr, "%s: %s: stopped after iteration %lld; saved %s; resume with: %s train "
            "--out_dir=%s --init_from=resume\n", r->prog, sig == SIGTERM ? "SIGTERM" : "SIGINT",
            (long long)r->iter - 1, r->path_ckpt, r->prog, r->f->out_dir);
    return 128 + sig;
}

/* The step's learning rate: nanoGPT's get_lr, or with --max_time the
 * cosine over the time left after the warmup (r->t_now, the same on every
 * rank). */
static double lr_now(run *r) {
    double T = r->f->max_time;
    if (!(T > 0)) return nb_lr_at(&r->sched, r->iter);
    if (r->t_warm < 0 && r->iter >= r->sched.warmup_iters) r->t_warm = r->t_now;
    double frac = r->t_warm < 0 ? 0 : T > r->t_warm ? (r->t_now - r->t_warm) / (T - r->t_warm) : 1;
    return nb_lr_at_fraction(&r->sched, r->iter, frac);
}

static int train_steps(run *r, nb_diag **diag) {
    const gpt_flags *f = r->f;
    nb_train_step step = {.opt = r->opt, .params = &r->gpt.params,
                          .accum_steps = (int)r->accum, .grad_clip = f->grad_clip,
                          .loss_fn = micro_loss, .user = r, .grad_sync = check_step,
                          .sync_user = r};
    const gpt_dist *d = r->hooks.dist;
    double tokens = (double)(r->B * r->T * r->accum * r->hooks.world);
    const double fake = test_step_seconds(), start = now_s();
    int64_t done = 0; /* steps of this process */
    int st;
    r->t_now = r->t_base;
    for (; r->iter < r->max_iters; r->iter++) {
        if (!r->bx && f->eval_interval && r->iter % f->eval_interval == 0 &&
            (st = evaluate(r, false)))
            return st;
        step.lr = lr_now(r);
        nb_gpt_train(&r->gpt, true);
        double t0 = now_s();
        nb_step_result res = {0};
        r->bad_loss = 0, r->bad_param = NULL;
        nb_status s = nb_train_step_run(r->sctx, &step, &res);
        if (s && (r->bad_loss != 0 || r->bad_param)) return diverged(r, &res, step.lr);
        if (s) {
            gpt_fail(r->prog, "iter %lld: %s", (long long)r->iter, batch_error(r, r->sctx));
            return r->batch_err[0] ? GPT_EXIT_USAGE : EXIT_INTERNAL;
        }
        if (!isfinite(res.grad_norm)) return diverged(r, &res, step.lr);
        done++;
        double lt[2] = {res.loss, r->t_base + (fake > 0 ? (double)done * fake : now_s() - start)};
        if (d && d->mean(d, lt, 2)) return GPT_EXIT_USAGE; /* the global batch's loss */
        res.loss = lt[0], r->t_now = lt[1];
        bool last = r->iter + 1 == r->max_iters || (f->max_time > 0 && r->t_now >= f->max_time);
        if (d && ((f->eval_interval && (r->iter + 1) % f->eval_interval == 0) || last) &&
            d->drift(d, &r->gpt.params, (long)r->iter))
            return GPT_EXIT_USAGE;
        double ms = 1e3 * (now_s() - t0);
        if (diagnostics(r, diag, res.loss, false)) return GPT_EXIT_USAGE;
        if (r->hooks.rank == 0) {
            if (r->iter % f->log_interval == 0) {
                printf("iter %lld: loss %.4f, time %.2f ms, %.0f tok/s\n", (long long)r->iter,
                       res.loss, ms, tokens / (ms / 1e3));
                fflush(stdout);
            }
            char a[32], b[32];
            if (log_line(r, "{\"iter\": %lld, \"loss\": %s, \"lr\": %s, \"ms\": %.3f",
                         (long long)r->iter, jnum(a, res.loss), jnum(b, step.lr), ms))
                return EXIT_INTERNAL;
        }
        if (g_signal && !last) return interrupted(r);
        if (last) {
            r->iter++;
            break;
        }
    }
    return !r->bx ? evaluate(r, true) : 0;
}

/* After the last step: the final save (every rank's generators gathered
 * first). */
static int final_save(run *r) {
    const gpt_dist *d = r->hooks.dist;
    if (d && r->peers &&
        d->gather(d, (nb_pcg32[2]){r->rng_model, r->rng_batch}, 2 * sizeof(nb_pcg32), r->peers))
        return GPT_EXIT_USAGE;
    int st = r->hooks.rank == 0 ? save_outputs(r) : 0;
    if (!st && g_signal) { /* it came during the last step: the run is complete */
        fprintf(stderr, "%s: %s during the last iteration: the run finished and is saved\n",
                r->prog, g_signal == SIGTERM ? "SIGTERM" : "SIGINT");
        st = 128 + g_signal;
    }
    return st;
}

/* The steps, the final save, then the diagnostics page (when asked, also
 * after a signal): a page that cannot be written never costs the
 * checkpoint. The diagnostics are freed whatever happened. */
static int train_loop(run *r) {
    nb_diag *diag = NULL;
    r->diag = &diag;
    int st = train_steps(r, &diag);
    if (st == 0) st = final_save(r);
    if ((st == 0 || st == 128 + SIGINT || st == 128 + SIGTERM) && diag &&
        diagnostics(r, &diag, 0, true) && st == 0)
        st = GPT_EXIT_USAGE;
    nb_diag_free(diag);
    r->diag = NULL;
    return st;
}

/* ---- files ------------------------------------------------------------------ */
/* --force: an earlier run's files move to out_dir/old-N/ (N the first free). */
static int move_aside(run *r) {
    char cfg[2][PATH_LEN + 16];
    snprintf(cfg[0], sizeof cfg[0], "%s/config.json", r->f->out_dir);
    snprintf(cfg[1], sizeof cfg[1], "%s/cfg.json", r->f->out_dir);
    const char *outs[] = {r->path_log, r->path_model, r->path_ckpt, r->path_svg, cfg[0], cfg[1]};
    const char *names[] = {"log.jsonl", "model.safetensors", "ckpt.safetensors", "loss.svg",
                           "config.json", "cfg.json"};
    struct stat st;
    bool any = false;
    for (int i = 0; i < 4; i++) any |= stat(outs[i], &st) == 0;
    if (!any) return 0;
    char dir[PATH_LEN], to[PATH_LEN + 32];
    for (int k = 1;; k++) {
        snprintf(dir, sizeof dir, "%s/old-%d", r->f->out_dir, k);
        if (mkdir(dir, 0777) == 0) break;
        if (errno != EEXIST) return gpt_fail(r->prog, "--force: %s: %s", dir, strerror(errno));
    }
    for (int i = 0; i < 6; i++) {
        snprintf(to, sizeof to, "%s/%s", dir, names[i]);
        if (stat(outs[i], &st) == 0 && rename(outs[i], to))
            return gpt_fail(r->prog, "--force: moving %s: %s", outs[i], strerror(errno));
    }
    printf("%s: --force: the earlier run's files are now in %s/\n", r->prog, dir);
    return 0;
}

static int set_paths(run *r) {
    const char *d = r->f->out_dir;
    int n = snprintf(r->path_log, PATH_LEN, "%s/log.jsonl", d);
    snprintf(r->path_model, PATH_LEN, "%s/model.safetensors", d);
    snprintf(r->path_ckpt, PATH_LEN, "%s/ckpt.safetensors", d);
    snprintf(r->path_svg, PATH_LEN, "%s/loss.svg", d);
    if (n >= PATH_LEN - 16) return gpt_fail(r->prog, "--out_dir: path too long");
    /* the temporary files of nb_save_safetensors, as it names them */
    snprintf(g_tmp[TMP_MODEL], sizeof g_tmp[0], "%s.tmp.%ld", r->path_model, (long)getpid());
    snprintf(g_tmp[TMP_CKPT], sizeof g_tmp[0], "%s.tmp.%ld", r->path_ckpt, (long)getpid());
    return 0;
}

/* Removes the temporary files "<dir>/<name>.tmp.<pid>" (or ".tmp") of
 * `names` that a killed run left: those whose process is gone. */
static void remove_stale_tmp(run *r, const char *dir, const char *const *names, int n) {
    DIR *d = opendir(dir[0] ? dir : ".");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        for (int i = 0; i < n; i++) {
            size_t k = strlen(names[i]);
            const char *tail = e->d_name + k;
            if (strncmp(e->d_name, names[i], k) || strncmp(tail, ".tmp", 4)) continue;
            char *end;
            long pid = tail[4] == '.' ? strtol(tail + 5, &end, 10) : 0;
            if (tail[4] && (tail[4] != '.' || *end || pid <= 0)) continue;
            if (pid == (long)getpid() || (pid > 0 && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)))
                continue; /* a live process's save */
            char path[PATH_LEN + 300];
            snprintf(path, sizeof path, "%s%s%s", dir, dir[0] ? "/" : "", e->d_name);
            if (unlink(path) == 0)
                fprintf(stderr, "%s: note: removed %s, the temporary file of a save that was "
                        "cut short\n", r->prog, path);
        }
    }
    if (d) closedir(d);
}

/* Before anything is written: out_dir with its parents (its stale
 * temporary files removed), and a fresh run only where no earlier run's
 * files are (unless --force). */
static int prepare_out_dir(run *r) {
    if (r->hooks.rank != 0 || r->f->eval_only || r->max_iters == 0) return 0;
    int st = gpt_mkdirs(r->prog, "--out_dir", r->f->out_dir);
    if (st) return st;
    const char *const mine[] = {"model.safetensors", "ckpt.safetensors", "log.jsonl",
                                "config.json", "cfg.json"};
    remove_stale_tmp(r, r->f->out_dir, mine, 5);
    if (r->resume) return 0;
    if (r->f->force) return move_aside(r);
    const char *outs[] = {r->path_log, r->path_model, r->path_ckpt, r->path_svg};
    struct stat sb;
    bool ckpt = stat(r->path_ckpt, &sb) == 0;
    for (int i = 0; i < 4; i++)
        if (stat(outs[i], &sb) == 0 && ckpt)
            return gpt_fail(r->prog, "%s exists from an earlier run: pass --init_from=resume "
                            "(or --resume) to continue it, or --force to start a new run (the "
                            "old files move to %s/old-N/)", outs[i], r->f->out_dir);
        else if (stat(outs[i], &sb) == 0)
            return gpt_fail(r->prog, "%s exists from an earlier run that stopped before its "
                            "first checkpoint (there is no %s to resume): pass --force to start "
                            "a new run (the old files move to %s/old-N/)", outs[i], r->path_ckpt,
                            r->f->out_dir);
    return 0;
}

/* The same directory, spelled with or without "./" and trailing slashes. */
static bool same_dir(const char *a, const char *b) {
    while (!strncmp(a, "./", 2)) a += 2;
    while (!strncmp(b, "./", 2)) b += 2;
    size_t na = strlen(a), nb = strlen(b);
    while (na > 1 && a[na - 1] == '/') na--;
    while (nb > 1 && b[nb - 1] == '/') nb--;
    return na == nb && !strncmp(a, b, na);
}

/* --diagnostics=PAGE, before the first step: PAGE and PAGE.jsonl are new
 * files (or --force replaces them) in a writable directory (or in out_dir,
 * about to be made), so the page cannot fail at the end of the run for its
 * path; their stale temporary files are removed. */
static int check_diagnostics_path(run *r) {
    const char *page = r->f->diagnostics, *slash = strrchr(page, '/');
    if (!page[0] || r->hooks.rank != 0 || r->f->eval_only || r->max_iters == 0) return 0;
    if (strlen(page) >= PATH_LEN - 40) return gpt_fail(r->prog, "--diagnostics: path too long");
    char dir[PATH_LEN];
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - page) + (slash == page) : 0, page);
    snprintf(r->path_diag_jsonl, PATH_LEN, "%s.jsonl", page);
    const char *files[2] = {page, r->path_diag_jsonl};
    struct stat sb;
    if (slash && !slash[1])
        return gpt_fail(r->prog, "--diagnostics=%s names a directory: give the path of a page "
                        "to write (such as %srun.html)", page, page);
    for (int i = 0; i < 2; i++) {
        if (stat(files[i], &sb)) continue;
        if (!S_ISREG(sb.st_mode))
            return gpt_fail(r->prog, "--diagnostics=%s: %s is %s, not a regular file: give the "
                            "path of a page to write", page, files[i], gpt_file_kind(sb.st_mode));
        if (!r->f->force)
            return gpt_fail(r->prog, "--diagnostics=%s: %s exists (an earlier run's): pass "
                            "--force to replace it, or give another path", page, files[i]);
    }
    if (stat(dir[0] ? dir : ".", &sb)) {
        if (errno == ENOENT && same_dir(dir, r->f->out_dir)) return 0; /* made before the run */
        return gpt_fail(r->prog, "--diagnostics=%s: the directory %s: %s (create it, or put the "
                        "page in an existing directory or in --out_dir)", page, dir, strerror(errno));
    }
    if (!S_ISDIR(sb.st_mode))
        return gpt_fail(r->prog, "--diagnostics=%s: %s is %s, not a directory", page, dir,
                        gpt_file_kind(sb.st_mode));
    if (access(dir[0] ? dir : ".", W_OK | X_OK))
        return gpt_fail(r->prog, "--diagnostics=%s: cannot write in the directory %s: %s", page,
                        dir[0] ? dir : ".", strerror(errno));
    const char *base = slash ? slash + 1 : page;
    char jbase[PATH_LEN];
    snprintf(jbase, sizeof jbase, "%s.jsonl", base);
    const char *const names[] = {base, jbase};
    remove_stale_tmp(r, dir, names, 2);
    return 0;
}

/* Metadata of model.safetensors, and of ckpt.safetensors with the run id
 * and the flags a resume takes (RESUME_FLAGS). */
#define META_MAX 128 /* the caller's pairs plus the optimizer's options (Muon has two groups) */
typedef struct meta {
    int n;
    const char *k[META_MAX], *v[META_MAX];
    char buf[3][32];
    char clock[2][32]; /* train_seconds, warmup_seconds (--max_time's clock) */
} meta;

static void meta_add(meta *m, const char *key, const char *value) {
    m->k[m->n] = key, m->v[m->n++] = value;
}

/* The flags a checkpoint fixes (a different value given on resume is an
 * error), then the ones a resume may change. */
static const char *const RESUME_FLAGS[] = {
    "arch", "n_layer", "n_head", "n_embd", "block_size", "dropout", "bias", "qkv_bias", "dtype",
    "n_kv_head", "head_dim", "hidden_dim", "rope_theta", "norm_eps", "qk_norm", "tie_head",
    "n_expert", "n_expert_per_tok", "moe_hidden_dim", "window", "hf_names",
    "data", "dataset", "batches", "init", "vocab_size", "batch_size",
    "gradient_accumulation_steps", "optimizer", "muon_lr", "muon_momentum", "muon_ns_steps",
    "learning_rate", "embedding_lr", "head_lr", "scalar_lr",
    "weight_decay", "weight_decay_1d", "beta1",
    "beta2", "grad_clip", "decay_lr", "warmup_iters", "min_lr", "seed", "eval_interval",
    "eval_iters", "always_save_checkpoint", NULL, "max_iters", "lr_decay_iters", "max_time", NULL};

/* --eval_only writes nothing, so its evaluation may use more batches than
 * the run did (nanoGPT's `--eval_only=True --eval_iters=500` on a resume). */
static bool eval_only_may_differ(const run *r, const char *flag) {
    return r->f->eval_only && !strcmp(flag, "eval_iters");
}

static void meta_fill(run *r, meta *m, bool ckpt) {
    const nb_gpt_config *c = &r->gpt.cfg;
    m->n = 0;
    meta_add(m, "arch", gpt_arch_name(c->arch));
    if (c->arch == NB_GPT_NANOGPT && c->gelu == NB_GELU_TANH) meta_add(m, "gelu", "tanh"); /* GPT-2's */
    snprintf(m->buf[0], 32, "%d", c->n_head);
    meta_add(m, "n_head", m->buf[0]);
    snprintf(m->buf[1], 32, "%lld", (long long)r->iter);
    meta_add(m, "iter", m->buf[1]);
    snprintf(m->buf[2], 32, "%d", r->hooks.world);
    meta_add(m, "world", m->buf[2]);
    if (r->has_vocab) {
        meta_add(m, "tokenizer", "char");
        if (!r->vocab_str) r->vocab_str = nb_char_vocab_to_string(r->pctx, &r->vocab);
        meta_add(m, "vocab", r->vocab_str);
    } else if (r->has_ds && !r->ds.has_meta) {
        meta_add(m, "tokenizer", "gpt2"); /* GPT-2 ids: sample decodes them with its BPE */
    }
    if (!ckpt) return;
    meta_add(m, "run_id", r->run_id);
    snprintf(m->clock[0], 32, "%.17g", r->t_now);
    meta_add(m, "train_seconds", m->clock[0]);
    snprintf(m->clock[1], 32, "%.17g", r->t_warm);
    meta_add(m, "warmup_seconds", m->clock[1]);
    for (int i = 0, b = 0, z = 0; z < 2; i++) {
        if (!RESUME_FLAGS[i]) { z++; continue; }
        char *key = r->flag_key[b], *val = r->flag_val[b++];
        snprintf(key, 64, "flag.%s", RESUME_FLAGS[i]);
        if (!strcmp(RESUME_FLAGS[i], "max_iters")) snprintf(val, PATH_LEN, "%lld", (long long)r->max_iters);
        else if (!strcmp(RESUME_FLAGS[i], "init")) snprintf(val, PATH_LEN, "%s", r->init);
        else gpt_flag_format(r->f, RESUME_FLAGS[i], val, PATH_LEN);
        meta_add(m, key, val);
    }
}

/* The extra tensors of the checkpoint, made once (they alias the run's
 * generators and counters). */
static nb_tensor_list *extra_list(run *r) {
    if (r->has_extra) return &r->extra;
    r->has_extra = true;
    nb_tensor_list *xp = &r->extra, x = {0};
    nb_list_add(&x, "rng_model", nb_pcg32_tensor(r->pctx, &r->rng_model));
    nb_list_add(&x, "rng_batch", nb_pcg32_tensor(r->pctx, &r->rng_batch));
    nb_list_add(&x, "iter", r->iter_t);
    nb_list_add(&x, "best_val_loss", r->best_t);
    for (int q = 1; r->peers && q < r->hooks.world; q++) { /* names live in pctx */
        char *nm = nb_ctx_alloc(r->pctx, 2 * 40);
        if (!nm) break;
        snprintf(nm, 40, "rng_model.rank%d", q);
        snprintf(nm + 40, 40, "rng_batch.rank%d", q);
        nb_list_add(&x, nm, nb_pcg32_tensor(r->pctx, &r->peers[2 * q]));
        nb_list_add(&x, nm + 40, nb_pcg32_tensor(r->pctx, &r->peers[2 * q + 1]));
    }
    *xp = x;
    return xp;
}

/* model.safetensors, then ckpt.safetensors (each atomic), then loss.svg.
 * A second signal in between ends the process: the old checkpoint stays. */
static int save_outputs(run *r) {
    meta mm, mc;
    meta_fill(r, &mm, false);
    meta_fill(r, &mc, true);
    ((int64_t *)r->iter_t->data)[0] = r->iter;
    ((double *)r->best_t->data)[0] = r->best_val;
    const nb_tensor_list *extra = extra_list(r);
    const char *how;
    if (nb_save_safetensors(r->pctx, r->path_model, &r->gpt.state_dict, mm.n, mm.k, mm.v))
        return gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx));
    if (r->gpt.cfg.arch >= NB_GPT_LLAMA3) { /* out_dir is a model directory (nb_gpt_load) */
        char cfg[PATH_LEN + 16];
        snprintf(cfg, sizeof cfg, "%s/%s", r->f->out_dir,
                 r->gpt.cfg.hf_names ? "config.json" : "cfg.json");
        if (nb_gpt_config_write(r->pctx, &r->gpt.cfg, cfg))
            return gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx));
    }
    if (g_signal && test_signal_at(&how) >= 0 && !strcmp(how, "TWICE")) {
        FILE *half = fopen(g_tmp[TMP_CKPT], "wb"); /* as the checkpoint's save has begun it */
        if (half) fputs("partial", half), fclose(half);
        raise(SIGINT);
    }
    if (nb_save_checkpoint(r->pctx, r->path_ckpt, &r->gpt.params, r->opt, extra, mc.n, mc.k, mc.v))
        return gpt_fail(r->prog, "%s", nb_ctx_error(r->pctx));
    r->ckpt_iter = r->iter;
    set_second_msg(r->prog, r->f->out_dir, r->path_ckpt, r->ckpt_iter);
    return gpt_write_loss_svg(r->prog, r->path_log, r->path_svg);
}

/* Resume, first part: the checkpoint's metadata (before anything is
 * built): the run id, and the flags, which must agree with the given ones. */
static int resume_meta(run *r) {
    const char *keys[META_MAX], *values[META_MAX];
    int n = 0, st = 0;
    nb_tensor_list l = {0};
    nb_ctx *tmp = nb_ctx_new(0);
    struct stat sb;
    if (stat(r->path_ckpt, &sb) && errno == ENOENT && stat(r->f->out_dir, &sb) == 0) {
        nb_ctx_free(tmp);
        return gpt_fail(r->prog, "--init_from=resume: there is no checkpoint to resume: %s does "
                        "not exist%s; start a new run (with --force if %s holds an earlier run's "
                        "files)", r->path_ckpt, access(r->path_log, F_OK) ? "" : " (the run "
                        "there stopped before its first save)", r->f->out_dir);
    }
    if (nb_load_safetensors_meta(tmp, r->path_ckpt, &l, META_MAX, &n, keys, values)) {
        gpt_fail(r->prog, "--init_from=resume: %s", nb_ctx_error(tmp));
        nb_ctx_free(tmp);
        return GPT_EXIT_USAGE;
    }
    n = n < META_MAX ? n : META_MAX;
    vocab_from_meta(r, n, keys, values);
    int world = 1;
    const char *id = NULL;
    for (int i = 0; i < n; i++) {
        if (!strcmp(keys[i], "world")) world = atoi(values[i]);
        if (!strcmp(keys[i], "run_id")) id = values[i];
        if (!strcmp(keys[i], "train_seconds")) r->t_base = atof(values[i]);
        if (!strcmp(keys[i], "warmup_seconds")) r->t_warm = atof(values[i]);
    }
    if (!id) st = gpt_fail(r->prog, "--init_from=resume: %s has no run_id: written by an older "
                           "nabla-gpt; start a new run with --force", r->path_ckpt);
    else snprintf(r->run_id, sizeof r->run_id, "%s", id);
    for (int i = 0, z = 0; !st && z < 2; i++) {
        if (!RESUME_FLAGS[i]) { z++; continue; }
        char key[64];
        snprintf(key, sizeof key, "flag.%s", RESUME_FLAGS[i]);
        for (int j = 0; j < n && !st; j++)
            if (!strcmp(keys[j], key))
                st = gpt_flags_adopt(&r->fl, r->prog, RESUME_FLAGS[i], values[j],
                                     z == 1 || eval_only_may_differ(r, RESUME_FLAGS[i]),
                                     r->path_ckpt);
    }
    nb_list_free(&l);
    nb_ctx_free(tmp);
    if (!st && world != r->hooks.world)
        st = gpt_fail(r->prog, "--resume: %s was saved by %d process(es) and this run has %d; "
                      "resume with the same rank count", r->path_ckpt, world, r->hooks.world);
    return st;
}

static int resume_state(run *r) {
    if (nb_load_checkpoint(r->pctx, r->path_ckpt, &r->gpt.params, r->opt, extra_list(r)))
        return gpt_fail(r->prog, "--init_from=resume: %s", nb_ctx_error(r->pctx));
    r->iter = r->ckpt_iter = ((int64_t *)r->iter_t->data)[0];
    r->best_val = ((double *)r->best_t->data)[0];
    if (r->peers && r->hooks.rank > 0) { /* this rank's generators, saved by rank 0 */
        r->rng_model = r->peers[2 * r->hooks.rank];
        r->rng_batch = r->peers[2 * r->hooks.rank + 1];
    }
    if (r->f->max_time > 0 && r->t_base >= r->f->max_time && !r->f->eval_only)
        return gpt_fail(r->prog, "--max_time=%g: the checkpoint %s has trained %g s already, so "
                        "there is nothing to train; give a larger --max_time to train longer. "
                        "Nothing was written.", r->f->max_time, r->path_ckpt, r->t_base);
    if (r->max_iters <= r->iter && !r->f->eval_only)
        return gpt_fail(r->prog, "--max_iters=%lld: the checkpoint %s is at iteration %lld "
                        "already, so there is nothing to train; give a larger --max_iters (and "
                        "--lr_decay_iters) to train longer. Nothing was written.",
                        (long long)r->max_iters, r->path_ckpt, (long long)r->iter);
    return 0;
}

/* log.jsonl: a new run's is new; a resumed run keeps its own lines (its run
 * id) of iterations before the checkpoint's, rewritten atomically, then
 * appends. Only rank 0 writes. */
static int open_log(run *r) {
    r->log_fd = -1;
    if (r->hooks.rank != 0) return 0;
    if (r->resume) {
        size_t len = 0;
        char tmp[PATH_LEN + 8], want[64];
        char *old = access(r->path_log, F_OK) ? calloc(1, 1) : gpt_read_file(r->prog, r->path_log, &len);
        if (!old) return GPT_EXIT_USAGE;
        snprintf(tmp, sizeof tmp, "%s.tmp", r->path_log);
        snprintf(want, sizeof want, "\"run\": \"%s\"}", r->run_id);
        FILE *f = fopen(tmp, "w");
        for (char *line = old, *nl; f && *line; line = nl ? nl + 1 : line + strlen(line)) {
            nl = strchr(line, '\n');
            if (!nl) break; /* a cut last line (an older writer) */
            *nl = '\0';
            long long it = -1;
            if (sscanf(line, "{\"iter\": %lld", &it) == 1 && it < r->iter && strstr(line, want))
                fprintf(f, "%s\n", line);
        }
        free(old);
        if (!f || fflush(f) || fsync(fileno(f)) || fclose(f) || rename(tmp, r->path_log))
            return gpt_fail(r->prog, "%s: %s", r->path_log, strerror(errno));
    }
    r->log_fd = open(r->path_log, O_WRONLY | O_CREAT | O_APPEND | (r->resume ? 0 : O_TRUNC), 0666);
    return r->log_fd < 0 ? gpt_fail(r->prog, "%s: %s", r->path_log, strerror(errno)) : 0;
}

static void new_run_id(run *r) {
    unsigned char b[8] = {0};
    FILE *f = fopen("/dev/urandom", "rb");
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    uint64_t x = 0;
    for (int i = 0; i < 8; i++) x = x << 8 | b[i];
    if (got != sizeof b) x ^= (uint64_t)time(NULL) << 20 ^ (uint64_t)getpid();
    snprintf(r->run_id, sizeof r->run_id, "%016llx", (unsigned long long)x);
}

/* ---- the whole run ------------------------------------------------------- */
static int load_data_and_model(run *r) {
    const gpt_flags *f = r->f;
    int st = 0;
    if (f->batches[0] && (st = load_batches(r))) return st;
    if (r->init[0] && f->data[0]) { /* the init's vocabulary encodes the text */
        if ((st = build_model(r))) return st;
        return load_text(r);
    }
    if (f->data[0] && (st = load_text(r))) return st;
    if (f->dataset[0] && (st = load_dataset(r))) return st;
    return build_model(r);
}

static int setup(run *r) {
    const gpt_flags *f = r->f;
    int st = set_paths(r);
    if (st) return st;
    if (r->resume && (st = resume_meta(r))) return st;
    r->init = f->init; /* --init_from=PATH was folded into it (gpt_train_run) */
    if (!f->data[0] && !f->batches[0] && !f->dataset[0])
        return gpt_fail(r->prog, "train needs one of --data=FILE, --dataset=NAME and --batches=FILE");
    if (!r->resume) new_run_id(r);
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
    if ((st = load_data_and_model(r))) return st;
    if (r->has_vocab && r->vocab.size != r->gpt.cfg.vocab_size)
        return gpt_fail(r->prog, "the data has %d characters but the model's vocabulary is %lld",
                        r->vocab.size, (long long)r->gpt.cfg.vocab_size);
    if (r->T > r->gpt.cfg.block_size)
        return gpt_fail(r->prog, "batches of %lld tokens exceed the model's block_size %lld",
                        (long long)r->T, (long long)r->gpt.cfg.block_size);
    if (r->bx && (st = check_batch_ids(r))) return st;
    if (r->has_ds && (st = check_dataset_ids(r))) return st;
    if (r->hooks.rank == 0 && !f->eval_only && r->max_iters > r->iter)
        gpt_flags_note_schedule(f, r->prog, r->max_iters);
    gpt_optim_opts oo = {f->optimizer, f->learning_rate, f->beta1, f->beta2, f->weight_decay,
                         f->muon_lr, f->muon_momentum, f->weight_decay_1d,
                         (int)f->muon_ns_steps, f->embedding_lr, f->head_lr, f->scalar_lr};
    r->opt = gpt_optim_new(r->pctx, &r->gpt, &oo);
    if (!r->opt) return gpt_fail(r->prog, "--optimizer=%s: %s", f->optimizer, nb_ctx_error(r->pctx));
    r->sched = (nb_lr_schedule){f->learning_rate, f->decay_lr, f->warmup_iters,
                                f->lr_decay_iters ? f->lr_decay_iters : r->max_iters, f->min_lr};
    r->iter_t = nb_scalar(r->pctx, NB_I64, 0);
    r->best_t = nb_scalar(r->pctx, NB_F64, INFINITY);
    if (r->resume && (st = resume_state(r))) return st;
    if ((st = check_diagnostics_path(r))) return st;
    return prepare_out_dir(r);
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

/* The run after setup: the banner, the loop, the final save. */
static int run_training(run *r) {
    const gpt_dist *d = r->hooks.dist;
    int st = 0;
    if (r->f->eval_only || r->max_iters == 0) { /* nanoGPT's eval_only: one evaluation, nothing written */
        if (!r->f->eval_only && r->hooks.rank == 0)
            printf("%s: --max_iters=0: nothing to train: one evaluation, nothing written (nanoGPT "
                   "saves no checkpoint at iteration 0)\n", r->prog);
        r->log_fd = -1;
        return d ? dist_start(r) || evaluate(r, true) : evaluate(r, true);
    }
    if ((st = open_log(r))) return st;
    if (r->hooks.rank == 0) {
        int threads = nb_get_num_threads();
        char limit[64] = "";
        if (r->f->max_time > 0)
            snprintf(limit, sizeof limit, " or %g s (%g s done)", r->f->max_time, r->t_base);
        printf("%s: %s, %lld parameters, vocab %lld, %lld iterations%s from %lld, run %s, "
               "%d thread%s\n", r->prog, gpt_arch_name(r->gpt.cfg.arch),
               (long long)nb_gpt_num_params(&r->gpt, false), (long long)r->gpt.cfg.vocab_size,
               (long long)r->max_iters, limit, (long long)r->iter, r->run_id, threads,
               threads == 1 ? "" : "s");
        fflush(stdout);
    }
    if (d && (st = dist_start(r))) return st;
    if (r->hooks.world == 1) {
        set_second_msg(r->prog, r->f->out_dir, r->path_ckpt, r->ckpt_iter);
        catch_signals();
    }
    return train_loop(r);
}

int gpt_train_run(const gpt_flags *f, const char *prog, const gpt_train_hooks *hooks) {
    run *r = calloc(1, sizeof *r);
    if (!r) return gpt_fail(prog, "out of memory");
    r->fl = *f, r->f = &r->fl, r->prog = prog;
    r->resume = f->resume || !strcmp(f->init_from, "resume");
    if (!f->init[0] && strcmp(f->init_from, "scratch") && !r->resume) r->fl.init = f->init_from;
    r->init = r->fl.init;
    r->best_val = INFINITY, r->ckpt_iter = -1, r->log_fd = -1, r->t_warm = -1;
    r->hooks = hooks ? *hooks : (gpt_train_hooks){.world = 1};
    if (r->hooks.dist) r->hooks.rank = r->hooks.dist->rank, r->hooks.world = r->hooks.dist->world;
    if (r->hooks.world < 1) r->hooks.world = 1;
    nb_set_num_threads((int)gpt_threads(prog, f->threads, r->hooks.world));
    r->pctx = nb_ctx_new(0), r->sctx = nb_ctx_new(0);
    if (f->anomaly && r->sctx) nb_set_detect_anomaly(r->sctx, true);
    int st = r->pctx && r->sctx ? setup(r) : gpt_fail(prog, "out of memory");
    if (!st) st = run_training(r);
    if (r->log_fd >= 0 && close(r->log_fd) && !st) st = gpt_fail(prog, "%s: write failed", r->path_log);
    if (r->hooks.dist) st = dist_finish(r, st);
    if (r->has_ds) gpt_dataset_close(&r->ds);
    if (r->has_extra) nb_list_free(&r->extra);
    free(r->peers);
    nb_optim_free(r->opt);
    nb_gpt_free(&r->gpt);
    nb_ctx_free(r->sctx), nb_ctx_free(r->pctx);
    free(r);
    return st;
}
