/* fuzz_input.h - what the fuzz targets (tests/fuzz/fuzz_*.c) and their replay
 * test (tests/check_fuzz_regressions.c) share: a file path for a byte buffer
 * without a file on disk, and the fixed model the checkpoint target loads
 * into. Header-only (static functions) so each target stays one file. */
#ifndef NB_FUZZ_INPUT_H
#define NB_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "nabla.h"

#ifdef _GNU_SOURCE /* the fuzz targets are built with it; the replay test needs no path */
#include <sys/mman.h>

/* A path that reads as data[0..size): an anonymous in-memory file
 * (memfd_create, a regular file to fstat) reached through /proc/self/fd, so
 * fuzzing leaves nothing behind. Returns the descriptor (close it when done)
 * or -1. */
static inline int nb_fuzz_path(const uint8_t *data, size_t size, char *path, size_t n) {
    int fd = memfd_create("nb-fuzz", 0);
    if (fd < 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            close(fd);
            return -1;
        }
        done += (size_t)w;
    }
    snprintf(path, n, "/proc/self/fd/%d", fd);
    return fd;
}
#endif

/* The checkpoint target's model: w (2, 3) and b (3) in F32, an Adam
 * optimizer over them, and the extras "rng" (nb_pcg32_tensor) and "step" (an
 * I64 scalar), after one Adam step. Values are fixed so a failed load can be checked to have
 * changed nothing. */
typedef struct nb_fuzz_model {
    nb_ctx *pctx;
    nb_tensor_list params, extra;
    nb_optim *opt;
    nb_pcg32 rng;
} nb_fuzz_model;

static inline int nb_fuzz_model_init(nb_fuzz_model *m) {
    memset(m, 0, sizeof *m);
    m->pctx = nb_ctx_new(0);
    if (!m->pctx)
        return -1;
    const double w[6] = {0.5, -1.25, 2, 0.125, -3, 4}, b[3] = {0.25, -0.5, 1};
    nb_tensor *tw = nb_requires_grad(nb_from_doubles(m->pctx, NB_F32, NB_SHAPE(2, 3), w));
    nb_tensor *tb = nb_requires_grad(nb_from_doubles(m->pctx, NB_F32, NB_SHAPE(3), b));
    nb_pcg32_seed(&m->rng, 42, 54);
    if (!tw || !tb || nb_list_add(&m->params, "w", tw) || nb_list_add(&m->params, "b", tb))
        return -1;
    if (nb_list_add(&m->extra, "rng", nb_pcg32_tensor(m->pctx, &m->rng)) ||
        nb_list_add(&m->extra, "step", nb_scalar(m->pctx, NB_I64, 7)))
        return -1;
    m->opt = nb_adam_new(m->pctx, &m->params, nb_adam_defaults(1e-3));
    if (!m->opt)
        return -1;
    /* One step, so the optimizer has moment buffers to save and restore. */
    for (int i = 0; i < 2; i++)
        for (size_t k = 0; k < m->params.t[i]->numel; k++)
            ((float *)m->params.t[i]->grad)[k] = 0.25f * (float)k - 0.5f;
    return nb_optim_step(m->opt) == NB_OK ? 0 : -1;
}

static inline void nb_fuzz_model_free(nb_fuzz_model *m) {
    nb_optim_free(m->opt);
    nb_ctx_free(m->pctx);
}

/* FNV-1a over every byte a checkpoint load may change: parameters, extras
 * and the optimizer's state. */
static inline uint64_t nb_fuzz_model_hash(nb_fuzz_model *m) {
    uint64_t h = 1469598103934665603u;
    nb_ctx *tmp = nb_ctx_new(4096);
    nb_tensor_list all = m->params;
    for (int i = 0; i < m->extra.n; i++)
        nb_list_add(&all, m->extra.names[i], m->extra.t[i]);
    nb_optim_state(tmp, m->opt, &all);
    for (int i = 0; i < all.n; i++) {
        const unsigned char *p = all.t[i]->data;
        size_t n = all.t[i]->numel * nb_dtype_size(all.t[i]->dtype);
        for (size_t k = 0; k < n; k++)
            h = (h ^ p[k]) * 1099511628211u;
    }
    nb_ctx_free(tmp);
    return h;
}

/* What a config nb_gpt_config_read accepted must satisfy (the config_json
 * target and its replay check it): a known family, and for Llama 3 / Qwen3
 * sizes the model can be built with (n_kv_head dividing n_head, an even
 * head_dim, at most n_expert experts a token, a positive window or none). */
static inline bool nb_fuzz_config_ok(const nb_gpt_config *c) {
    if (c->arch != NB_GPT_GPTMODEL && c->arch != NB_GPT_NANOGPT && c->arch != NB_GPT_LLAMA3 &&
        c->arch != NB_GPT_QWEN3)
        return false;
    if (c->vocab_size < 1 || c->block_size < 1 || c->n_layer < 1 || c->n_head < 1 ||
        c->n_embd < 1)
        return false;
    if (c->arch == NB_GPT_GPTMODEL || c->arch == NB_GPT_NANOGPT) return true;
    return c->n_kv_head >= 1 && c->n_head % c->n_kv_head == 0 && c->head_dim >= 2 &&
           c->head_dim % 2 == 0 && c->window >= 0 &&
           (c->n_expert == 0 || (c->n_expert_per_tok >= 1 &&
                                 c->n_expert_per_tok <= c->n_expert)) &&
           c->norm_eps > 0 && c->rope_theta > 0;
}

#endif
