/* gpt_flags.h - the flags of nabla-gpt (and of the MPI driver nabla-gpt-mpi,
 * which takes the same ones): nanoGPT's config names in its --key=value
 * form, each with a default, parsed from argv and listed by --help.
 * Internal to the tools: not installed, not in the library. */
#ifndef NB_GPT_FLAGS_H
#define NB_GPT_FLAGS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "nabla.h"

#define GPT_EXIT_USAGE 2 /* bad usage or bad input */

typedef enum gpt_cmd { GPT_TRAIN = 1, GPT_SAMPLE = 2, GPT_BENCH = 4, GPT_INIT = 8 } gpt_cmd;

typedef struct gpt_flags {
    /* model */
    const char *arch;
    long n_layer, n_head, n_embd, block_size, vocab_size;
    double dropout;
    bool bias, qkv_bias;
    /* Llama 3 and Qwen3 (--arch=llama3|qwen3): 0 means the family's default */
    long n_kv_head, head_dim, hidden_dim, n_expert, n_expert_per_tok, moe_hidden_dim, window;
    double rope_theta, norm_eps;
    bool qk_norm, tie_head, hf_names;
    /* training */
    long batch_size, max_iters, warmup_iters, lr_decay_iters, eval_interval, eval_iters,
        gradient_accumulation_steps, seed, threads, muon_ns_steps;
    double learning_rate, weight_decay, beta1, beta2, grad_clip, min_lr, muon_lr, muon_momentum,
        embedding_lr, head_lr, scalar_lr, max_time;
    bool weight_decay_1d, decay_lr, resume, force, always_save_checkpoint, eval_only, eval_full,
        eval_train, anomaly, compile, wandb_log;
    long log_interval;
    const char *optimizer; /* adamw or muon */
    const char *dtype, *data, *dataset, *out_dir, *init, *init_from, *batches, *device,
        *wandb_project, *wandb_run_name;
    const char *diagnostics; /* --diagnostics=PAGE, "" for none */
    const char *out;         /* init: --out=DIR */
    /* bench */
    const char *preset; /* --config=NAME: a named set of shapes (the positional file is `config`) */
    long rounds, seq_len;
    bool sample;
    /* sampling */
    const char *start, *tokenizer_dir;
    long num_samples, max_new_tokens, top_k;
    double temperature;
    /* which flags the command line gave (bit i: flag i of the table) */
    uint64_t given[2];
    const char *config; /* the positional config file, or NULL */
} gpt_flags;

/* Fills f with the defaults, then parses argv[first..argc-1] for command
 * `cmd`. 0 when all is well; 1 after --help (usage printed to stdout); else
 * GPT_EXIT_USAGE after a message on stderr naming the flag. `prog` names the
 * program in messages and usage. */
int gpt_flags_parse(gpt_flags *f, gpt_cmd cmd, const char *prog, int argc, char **argv,
                    int first);

/* Prints every flag of `cmd` with its default and meaning. */
void gpt_flags_usage(FILE *out, gpt_cmd cmd, const char *prog);

/* True when the command line gave flag `name`. */
bool gpt_flag_given(const gpt_flags *f, const char *name);

/* The value of train's flag `name` as text (numbers exactly: %.17g). */
bool gpt_flag_format(const gpt_flags *f, const char *name, char *buf, size_t n);

/* On resume: `value` is the checkpoint's (src, for messages) for flag
 * `name`. Taken when the command line did not give the flag; given, it must
 * be the same value (else an error naming both), unless may_differ. 0 or
 * GPT_EXIT_USAGE. */
int gpt_flags_adopt(gpt_flags *f, const char *prog, const char *name, const char *value,
                    bool may_differ, const char *src);

/* Notes on stderr for schedules that nanoGPT runs but that surprise (after
 * a resume completed the flags; max_iters: the run's): min_lr above
 * learning_rate, lr_decay_iters below warmup_iters. Nothing is refused. */
void gpt_flags_note_schedule(const gpt_flags *f, const char *prog, long max_iters);

/* The thread count: want, or with want 0 $NB_NUM_THREADS, else
 * $OMP_NUM_THREADS, else the cores online (at most 64, the pool's limit),
 * or 1 for each of procs > 1 processes (MPI ranks: torchrun likewise sets
 * OMP_NUM_THREADS=1); lowered to the cores online with a note when more. */
long gpt_threads(const char *prog, long want, int procs);

/* nb_gpt_arch / nb_dtype of the flags (valid after a successful parse). */
nb_gpt_arch gpt_flags_arch(const gpt_flags *f);
/* --arch's name of a family: gptmodel, nanogpt, llama3, qwen3. */
const char *gpt_arch_name(nb_gpt_arch arch);
/* The model the flags describe, with vocab_size V: every size flag, each 0
 * of the Llama 3 / Qwen3 flags replaced by the family's default (hidden_dim
 * 4 n_embd for llama3 and 3 n_embd for qwen3, as Llama 3.2-1B and
 * Qwen3-0.6B; rope_theta 500000 / 1e6; norm_eps 1e-5 / 1e-6;
 * moe_hidden_dim hidden_dim / n_expert_per_tok, so the k experts a token
 * runs through cost about one dense MLP). */
nb_gpt_config gpt_flags_model(const gpt_flags *f, int64_t vocab_size);
nb_dtype gpt_flags_dtype(const gpt_flags *f);

/* Prints "<prog>: <message>" to stderr; returns GPT_EXIT_USAGE. */
int gpt_fail(const char *prog, const char *fmt, ...) NB_PRINTF_LIKE(2, 3);

/* The message of the last gpt_fail (empty before the first). */
const char *gpt_last_error(void);

/* Reads a whole file into a malloc'ed buffer (NUL-terminated; *len bytes
 * before the NUL). Regular files only: anything else (a directory, a
 * device, a FIFO) is refused before any read, with a message saying which.
 * NULL after a message naming the file. */
char *gpt_read_file(const char *prog, const char *path, size_t *len);

/* "a directory", "a character device", ... for a file that is not regular. */
const char *gpt_file_kind(mode_t mode);

#endif
