/* gpt_data.h - nanoGPT's prepared datasets for nabla-gpt: `--dataset=NAME`
 * (data/NAME or NAME: train.bin and val.bin of uint16 little-endian token
 * ids, memory-mapped, and meta.pkl's vocabulary) and `nabla-gpt prepare`
 * (what data/shakespeare_char/prepare.py writes). Internal to the tools. */
#ifndef NB_GPT_DATA_H
#define NB_GPT_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "gpt_pickle.h"
#include "nabla.h"

typedef struct gpt_tokens {
    const unsigned char *u16; /* n little-endian uint16 ids (a read-only mapping) */
    int64_t n;
    size_t map_len;
} gpt_tokens;

typedef struct gpt_dataset {
    char dir[4096];
    gpt_tokens train, val;
    bool has_meta;            /* meta.pkl was there (else GPT-2 ids, no vocabulary) */
    gpt_meta_pkl meta;
} gpt_dataset;

/* Opens data/NAME (or NAME when data/NAME is not a directory). 0, or
 * GPT_EXIT_USAGE after a message. */
int gpt_dataset_open(const char *prog, const char *name, gpt_dataset *ds);
void gpt_dataset_close(gpt_dataset *ds);

/* nanoGPT's get_batch over mapped ids, drawing as nb_get_batch does; every
 * id must be below vocab. 0, or -1 with a message in err[0..n-1]. */
int gpt_tokens_batch(nb_ctx *ctx, const gpt_tokens *t, int64_t vocab, int64_t B, int64_t T,
                     nb_pcg32 *rng, nb_tensor **x, nb_tensor **y, char *err, size_t n);

/* `nabla-gpt prepare --data=input.txt --out_dir=DIR`: 0, or GPT_EXIT_USAGE. */
int gpt_prepare(const char *prog, const char *input, const char *out_dir);

/* Python's text-mode read: "\r\n" and a lone "\r" become "\n", in place;
 * the new length. */
size_t gpt_universal_newlines(char *s, size_t n);

/* mkdir -p: 0, or GPT_EXIT_USAGE after a message naming the flag. */
int gpt_mkdirs(const char *prog, const char *flag, const char *path);

#endif
