/* nabla/data.h - text data for a character-level language model: the
 * tokenizer, the train/val split and nanoGPT's random batches.
 *
 *   nb_char_vocab v;
 *   if (nb_char_vocab_build(ctx, text, len, &v)) fail(nb_ctx_error(ctx));
 *   nb_tensor *ids = nb_char_encode(ctx, &v, text, len);      // I64 (n)
 *   nb_token_split s = nb_token_split_90_10(ctx, ids);        // views, no copy
 *   nb_tensor *x, *y;                                         // I64 (B, T)
 *   nb_get_batch(ctx, s.train, B, T, &rng, &x, &y);
 *
 * Tokens are Unicode code points: the vocabulary is the text's distinct code
 * points in increasing order (for ASCII, byte order), and a token id is the
 * index of its code point there. Text is UTF-8 (no BOM handling: U+FEFF is a
 * character like any other). The vocabulary travels with a model as one
 * safetensors metadata value (nb_char_vocab_to_string), so sampling needs no
 * other file.
 *
 * Every function takes the context whose arena holds its results and which
 * records its errors; it does nothing when the context already holds one. */
#ifndef NABLA_DATA_H
#define NABLA_DATA_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct nb_pcg32;

typedef struct nb_char_vocab {
    int size;                /* number of tokens, >= 1 */
    const uint32_t *chars;   /* (size) code points, strictly increasing, in ctx */
} nb_char_vocab;

/* Checks that text[0..len-1] is valid UTF-8 (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF, no truncated sequence). NB_OK, or
 * NB_ERR_VALUE with a message naming `op` and the byte offset of the first
 * bad sequence. NB_ERR_NULL for a NULL ctx or (len > 0) text. */
nb_status nb_utf8_check(nb_ctx *ctx, const char *op, const char *text, size_t len);

/* The vocabulary of text[0..len-1]: its distinct code points, sorted.
 * Errors: NB_ERR_NULL (ctx, text, out), NB_ERR_VALUE for empty text or
 * invalid UTF-8 (with the byte offset). On error *out is {0, NULL}. */
nb_status nb_char_vocab_build(nb_ctx *ctx, const char *text, size_t len, nb_char_vocab *out);

/* The ids of text[0..len-1] as an I64 tensor of shape (number of code
 * points). NULL and an error for invalid UTF-8, empty text or a character
 * that is not in the vocabulary (the message shows it and its offset). */
nb_tensor *nb_char_encode(nb_ctx *ctx, const nb_char_vocab *v, const char *text, size_t len);

/* The UTF-8 text of ids[0..n-1], NUL-terminated, in ctx's arena; *out_len
 * (may be NULL) receives its length in bytes, which is shorter than the
 * string when the text holds U+0000. NULL and an error for an id outside
 * 0..size-1 (n may be 0: the empty string). */
char *nb_char_decode(nb_ctx *ctx, const nb_char_vocab *v, const int64_t *ids, size_t n,
                     size_t *out_len);

/* The vocabulary as a metadata value: its code points in decimal, separated
 * by single spaces ("10 32 33 ..."), in ctx's arena. Plain ASCII, so any
 * character, including control characters and U+0000, survives JSON. */
char *nb_char_vocab_to_string(nb_ctx *ctx, const nb_char_vocab *v);

/* Parses nb_char_vocab_to_string's format back. NB_ERR_FORMAT (naming the
 * position) for anything else: an empty list, a non-number, a code point
 * above U+10FFFF or a surrogate, code points not strictly increasing. */
nb_status nb_char_vocab_from_string(nb_ctx *ctx, const char *s, nb_char_vocab *out);

/* nanoGPT's split: the first floor(0.9 * n) tokens train, the rest
 * validate. Both are 1-D I64 views into `ids` (no copy), made in ctx; a part
 * that would be empty (train when n == 1) is NULL without an error. Both
 * are NULL, with an error (NB_ERR_NULL, NB_ERR_DTYPE), unless ids is a 1-D
 * I64 tensor. */
typedef struct nb_token_split {
    nb_tensor *train; /* I64 (floor(0.9 n)) */
    nb_tensor *val;   /* I64 (n - floor(0.9 n)) */
} nb_token_split;
nb_token_split nb_token_split_90_10(nb_ctx *ctx, nb_tensor *ids);

/* nanoGPT's get_batch: for b = 0..B-1 draws i_b = nb_pcg32_bounded(rng,
 * n - T) (n = data's length), then x[b] = data[i_b : i_b + T] and y[b] =
 * data[i_b + 1 : i_b + T + 1]. x and y are new I64 (B, T) tensors in ctx.
 * Errors: NB_ERR_NULL (ctx, data, rng, x, y), NB_ERR_DTYPE (data not a 1-D
 * I64 tensor), NB_ERR_VALUE (B or T < 1, or data shorter than T + 1 tokens:
 * the message gives both numbers). On error *x and *y are NULL. */
nb_status nb_get_batch(nb_ctx *ctx, const nb_tensor *data, int64_t B, int64_t T,
                       struct nb_pcg32 *rng, nb_tensor **x, nb_tensor **y);

#ifdef __cplusplus
}
#endif
#endif
