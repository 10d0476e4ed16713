/* fuzz_text.h - the properties the text fuzz target (fuzz_text.c) checks,
 * shared with the replay test (tests/check_fuzz_regressions.c). Needs
 * nabla/data.h (nabla-gpt's tokenizer). */
#ifndef NB_FUZZ_TEXT_H
#define NB_FUZZ_TEXT_H

#include <stdlib.h>
#include <string.h>

#include "nabla.h"
#include "nabla/data.h"

static inline bool nb_fuzz_same_vocab(const nb_char_vocab *a, const nb_char_vocab *b) {
    return a->size == b->size && !memcmp(a->chars, b->chars, (size_t)a->size * sizeof *a->chars);
}

/* The text round trips; a batch of its ids can be drawn. */
static inline bool nb_fuzz_text_path(nb_ctx *ctx, const char *text, size_t size) {
    nb_status utf8 = nb_utf8_check(ctx, "fuzz", text, size);
    nb_ctx_clear_error(ctx);
    nb_char_vocab v;
    nb_status st = nb_char_vocab_build(ctx, text, size, &v);
    if (st) {
        if (size > 0 && utf8 == NB_OK)
            return false; /* valid, non-empty text has a vocabulary */
        nb_ctx_clear_error(ctx);
        return true;
    }
    nb_tensor *ids = nb_char_encode(ctx, &v, text, size);
    if (!ids)
        return false;
    size_t len = 0;
    char *back = nb_char_decode(ctx, &v, ids->data, ids->numel, &len);
    if (!back || len != size || memcmp(back, text, size))
        return false;
    nb_char_vocab v2;
    char *s = nb_char_vocab_to_string(ctx, &v);
    if (!s || nb_char_vocab_from_string(ctx, s, &v2) || !nb_fuzz_same_vocab(&v, &v2))
        return false;
    nb_token_split sp = nb_token_split_90_10(ctx, ids);
    nb_pcg32 rng;
    nb_pcg32_seed(&rng, size, 1);
    nb_tensor *x, *y;
    if (sp.train && nb_get_batch(ctx, sp.train, 2, 1 + (int64_t)(size % 5), &rng, &x, &y))
        nb_ctx_clear_error(ctx);
    return true;
}

/* The input as a vocabulary string: parsed, or refused; a parsed one
 * prints back to a string that parses to the same vocabulary. */
static inline bool nb_fuzz_vocab_string(nb_ctx *ctx, const char *s) {
    nb_char_vocab v, v2;
    if (nb_char_vocab_from_string(ctx, s, &v)) {
        if (!nb_ctx_error(ctx))
            return false;
        nb_ctx_clear_error(ctx);
        return true;
    }
    char *again = nb_char_vocab_to_string(ctx, &v);
    return again && !nb_char_vocab_from_string(ctx, again, &v2) && nb_fuzz_same_vocab(&v, &v2);
}

/* Both paths over data[0..size); false when a property fails. */
static inline bool nb_fuzz_text(nb_ctx *ctx, const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1); /* exactly size bytes readable, plus the NUL */
    if (!copy)
        return true;
    memcpy(copy, data, size);
    copy[size] = '\0';
    nb_ctx_reset(ctx);
    bool ok = nb_fuzz_text_path(ctx, copy, size);
    nb_ctx_reset(ctx);
    ok = ok && nb_fuzz_vocab_string(ctx, copy);
    free(copy);
    return ok;
}

#endif
