/* nabla/data.h - text data for a language model: the character-level
 * tokenizer, GPT-2's byte-level BPE tokenizer (below, nb_bpe), the train/val
 * split and nanoGPT's random batches.
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
 * NB_ERR_VALUE with a message naming `op` ("utf8_check" when op is NULL) and
 * the byte offset of the first bad sequence. NB_ERR_NULL for a NULL ctx or
 * (len > 0) text. */
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

/* ---- GPT-2's tokenizer: byte-level BPE --------------------------------------
 *
 *   nb_bpe *bpe = nb_bpe_load(ctx, "encoder.json", "vocab.bpe");  // or vocab.json, merges.txt
 *   nb_tensor *ids = nb_bpe_encode(ctx, bpe, text, len, false);    // I64 (n)
 *   size_t n;
 *   char *back = nb_bpe_decode(ctx, bpe, ids->data, ids->numel, &n); // == text, n == len
 *   nb_bpe_free(bpe);
 *
 * The same ids as tiktoken's "gpt2" encoding (nanoGPT's prepare.py uses its
 * encode_ordinary) for any valid UTF-8 text:
 * - the text is cut into pieces by GPT-2's pattern
 *     's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   (PCRE2 with Unicode classes), so a merge never crosses a piece;
 * - a piece that is a token is that token; otherwise it starts as its bytes
 *   and, while two neighbours join into a token made by a merge, the pair
 *   whose token has the lowest rank (its line in the merges file; the
 *   leftmost on a tie) becomes that token.
 * The files are either pair, which hold the same tokens: OpenAI's
 * encoder.json + vocab.bpe, or Hugging Face's vocab.json + merges.txt. The
 * vocabulary is a JSON object of token -> id (ids 0..n-1, each once); a
 * token is written in GPT-2's byte alphabet (each of the 256 bytes as one
 * printable character: a space is "\u0120", "Ġ"). The merges file has one
 * merge a line, two tokens separated by one space, the first line skipped
 * when it starts with "#version"; blank lines are ignored. Special tokens
 * are the vocabulary's tokens that are neither one byte nor made by a
 * merge: GPT-2's one is "<|endoftext|>", id 50256.
 *
 * Bytes that are not valid UTF-8 (which tiktoken, taking a string, never
 * sees) are encoded too: each run of them is a piece of its own, and the
 * valid text between them is pre-tokenized as if it were the whole text.
 * So any bytes encode, and decode gives them back.
 *
 * An nb_bpe is read-only once loaded: threads may encode and decode with
 * one at once, each with its own context. */
typedef struct nb_bpe nb_bpe;

/* Loads a tokenizer from a vocabulary (encoder.json / vocab.json) and its
 * merges (vocab.bpe / merges.txt). Returns a new tokenizer (free it with
 * nb_bpe_free; it does not live in ctx), or NULL with an error on ctx whose
 * message names the file and the problem: NB_ERR_NULL (ctx, a path),
 * NB_ERR_IO (a file cannot be read), NB_ERR_FORMAT (not JSON, not an object
 * of token -> whole-number id, ids that are not 0..n-1 each once, a token
 * written twice or with a character outside the byte alphabet, a byte
 * without a token, a merges line that is not two tokens, a merge naming a
 * token the vocabulary lacks or making one it lacks). */
nb_bpe *nb_bpe_load(nb_ctx *ctx, const char *vocab_path, const char *merges_path);

/* Frees a tokenizer. NULL is a no-op. */
void nb_bpe_free(nb_bpe *t);

/* The number of tokens, n (ids are 0..n-1): 50257 for GPT-2. 0 for NULL. */
int64_t nb_bpe_vocab_size(const nb_bpe *t);

/* The id of the token whose bytes are `text` (NUL-terminated): 50256 for
 * "<|endoftext|>", 262 for " the" (tiktoken's encode_single_token). -1 when
 * no token has exactly these bytes, or t or text is NULL. */
int64_t nb_bpe_token_id(const nb_bpe *t, const char *text);

/* The ids of text[0..len-1] as an I64 tensor of shape (number of tokens),
 * in ctx. allow_special false is tiktoken's encode_ordinary: a special
 * token's text is encoded as plain text; true is encode(text,
 * allowed_special="all"): each occurrence of a special token's text (the
 * longest at a position) becomes its id. Any bytes encode (see above).
 * NULL and an error for NULL arguments (NB_ERR_NULL) and empty text
 * (NB_ERR_VALUE: a tensor has at least one element). */
nb_tensor *nb_bpe_encode(nb_ctx *ctx, const nb_bpe *t, const char *text, size_t len,
                         bool allow_special);

/* The bytes of ids[0..n-1] (each token's bytes, in order; a special token
 * gives its text), NUL-terminated, in ctx's arena; *len (may be NULL)
 * receives their number. The bytes need not be valid UTF-8 (a token may
 * end inside a character): nb_utf8_display makes them printable. NULL and
 * an error for an id outside 0..n-1 (naming it and its position); n may be
 * 0 (the empty string). */
char *nb_bpe_decode(nb_ctx *ctx, const nb_bpe *t, const int64_t *ids, size_t n, size_t *len);

/* text[0..len-1] as valid UTF-8 for printing, NUL-terminated, in ctx's
 * arena: each maximal part of an invalid sequence becomes U+FFFD (the
 * WHATWG / Unicode "maximal subpart" rule, as TextDecoder and Python's
 * errors="replace" do); valid text comes back unchanged. *out_len (may be
 * NULL) receives its length in bytes. NULL and NB_ERR_NULL for NULL text
 * with len > 0. */
char *nb_utf8_display(nb_ctx *ctx, const char *text, size_t len, size_t *out_len);

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
