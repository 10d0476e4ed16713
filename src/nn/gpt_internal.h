/* gpt_internal.h - the pieces of the GPT forward shared by gpt.c (full
 * forward), gpt_sample.c (KV cache, generation) and gpt_summary.c. */
#ifndef NB_GPT_INTERNAL_H
#define NB_GPT_INTERNAL_H

#include "ops/ops_internal.h"

/* init with separate generators for the weights (NULL: zeros) and dropout. */
NB_HIDDEN nb_status nb_gpt_init_impl(nb_ctx *pctx, nb_gpt *m, const nb_gpt_config *cfg,
                                     nb_pcg32 *draw, nb_pcg32 *dropout_rng);
/* ids is I64 (B, T), 1 <= T <= max_t, values in [0, V); else an error on ctx. */
NB_HIDDEN bool nb_gpt_check_ids(nb_ctx *ctx, const nb_gpt *m, const nb_tensor *ids,
                                const char *what, int64_t max_t);
/* wte[ids] + wpe[pos0 ..], dropout: (B, T) -> (B, T, C) */
NB_HIDDEN nb_tensor *nb_gpt_embed(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids, int64_t pos0);
/* x @ w^T + b; a dot-product loop for few rows when nothing is recorded */
NB_HIDDEN nb_tensor *nb_gpt_linear(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b);
/* the model's dropout (identity in eval mode or with p 0) */
NB_HIDDEN nb_tensor *nb_gpt_dropout(nb_ctx *ctx, nb_gpt *m, nb_tensor *x);
/* Linear(C, 4C), GELU, Linear(4C, C): (B, T, C) -> (B, T, C) */
NB_HIDDEN nb_tensor *nb_gpt_mlp(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h);
/* block i; with a cache, attention reads and extends it (inference only) */
NB_HIDDEN nb_tensor *nb_gpt_block_forward(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x,
                                          nb_gpt_cache *cache);
/* final norm and head: (B, T, C) -> (B, T, V) */
NB_HIDDEN nb_tensor *nb_gpt_head(nb_ctx *ctx, nb_gpt *m, nb_tensor *x);
/* gpt_sample.c: attention of layer i over the cache and h's positions;
 * h (B, n, C) -> (B, n, C), after the output projection. */
NB_HIDDEN nb_tensor *nb_gpt_cached_attention(nb_ctx *ctx, nb_gpt *m, nb_gpt_cache *c, int i,
                                             nb_tensor *h);

#endif
