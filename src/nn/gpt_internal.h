/* gpt_internal.h - the pieces of the GPT forward shared by gpt.c (full
 * forward), gpt_sample.c (KV cache, generation) and gpt_summary.c. The
 * calls go one way: gpt_sample.c uses gpt.c, gpt.c knows nothing of the
 * cache. */
#ifndef NB_GPT_INTERNAL_H
#define NB_GPT_INTERNAL_H

#include "ops/ops_internal.h"

/* init with separate generators for the weights (NULL: zeros) and dropout. */
NB_HIDDEN nb_status nb_gpt_init_impl(nb_ctx *pctx, nb_gpt *m, const nb_gpt_config *cfg,
                                     nb_pcg32 *draw, nb_pcg32 *dropout_rng);
/* ids is I64 (B, T), 1 <= T <= max_t, values in [0, V); else an error on ctx. */
NB_HIDDEN bool nb_gpt_check_ids(nb_ctx *ctx, const nb_gpt *m, const nb_tensor *ids,
                                const char *what, int64_t max_t);
/* wte[ids] + wpe[pos0 ..], dropout: (B, T) -> (B, T, C); wte[ids] alone for
 * the RoPE families (their positions are turned into q and k) */
NB_HIDDEN nb_tensor *nb_gpt_embed(nb_ctx *ctx, nb_gpt *m, const nb_tensor *ids, int64_t pos0);
/* x @ w^T + b; a dot-product loop for few rows when nothing is recorded */
NB_HIDDEN nb_tensor *nb_gpt_linear(nb_ctx *ctx, nb_tensor *x, nb_tensor *w, nb_tensor *b);
/* the model's dropout (identity in eval mode or with p 0) */
NB_HIDDEN nb_tensor *nb_gpt_dropout(nb_ctx *ctx, nb_gpt *m, nb_tensor *x);
/* Llama 3 / Qwen3: q (B, T, H, hd), k and v (B, T, Hkv, hd) of h (B, T, C)
 * at positions pos0..: the projections (views of their outputs, no copy),
 * RMSNorm over hd on q and k (qk_norm), RoPE on q and k. 0, or -1 with the
 * error on ctx. */
NB_HIDDEN int nb_gpt_qkv(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h, int64_t pos0,
                         nb_tensor **q, nb_tensor **k, nb_tensor **v);
/* The block's MLP: Linear(C, 4C), GELU, Linear(4C, C), or the gated MLP,
 * or the mixture of gated experts: (B, T, C) -> (B, T, C) */
NB_HIDDEN nb_tensor *nb_gpt_mlp(nb_ctx *ctx, nb_gpt *m, nb_gpt_block *blk, nb_tensor *h);
/* Block i in two halves around its attention, so that gpt_sample.c can put
 * the cached attention in between:
 *     h = nb_gpt_block_norm1(x);  a = attention(h);  x = nb_gpt_block_finish(x, a)
 * norm1 is the first LayerNorm; finish is x + dropout(a), then
 * x + dropout(mlp(norm2(x))). (B, T, C) in and out. */
NB_HIDDEN nb_tensor *nb_gpt_block_norm1(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x);
NB_HIDDEN nb_tensor *nb_gpt_block_finish(nb_ctx *ctx, nb_gpt *m, int i, nb_tensor *x,
                                         nb_tensor *a);
/* final norm and head: (B, T, C) -> (B, T, V) */
NB_HIDDEN nb_tensor *nb_gpt_head(nb_ctx *ctx, nb_gpt *m, nb_tensor *x);

/* ---- files (gpt_files.c, gpt_config_json.c) ---- */
struct cJSON;
/* The JSON object in the regular file `path` (cJSON_Delete it); NULL with
 * an error on ctx naming fn and the path (unreadable, not an object,
 * something after it). */
NB_HIDDEN struct cJSON *nb_gpt_json_read(nb_ctx *ctx, const char *fn, const char *path);
/* The path of file `name` in path's directory (malloc'd), NULL when out of memory. */
NB_HIDDEN char *nb_gpt_beside(const char *path, const char *name);
/* text written and fsync'ed to "<path>.tmp.<pid>": returns that name
 * (malloc'd) for nb_gpt_text_commit, or NULL with an error on ctx (path
 * exists and is not a regular file or a directory, or a write failed). */
NB_HIDDEN char *nb_gpt_text_stage(nb_ctx *ctx, const char *fn, const char *path,
                                  const char *text);
/* Renames the staged tmp over path (removing tmp on failure); frees tmp. */
NB_HIDDEN nb_status nb_gpt_text_commit(nb_ctx *ctx, const char *fn, char *tmp, const char *path);
/* cfg as the JSON text nb_gpt_config_write writes (malloc'd), or NULL with
 * an error on ctx naming fn (a config the layout cannot express). */
NB_HIDDEN char *nb_gpt_config_json(nb_ctx *ctx, const char *fn, const nb_gpt_config *cfg);

#endif
