/* tokenizer.c - the character-level tokenizer: code points of UTF-8 text to
 * ids in a sorted vocabulary and back, and the vocabulary as a metadata
 * string. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/data.h"
#include "core/core_internal.h"

#define CODE_POINTS 0x110000u

nb_status nb_utf8_check(nb_ctx *ctx, const char *op, const char *text, size_t len) {
    if (!nb_ctx_ok(ctx)) return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    if (!op) op = "utf8_check"; /* the messages always name someone */
    if (!text && len) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL text", op);
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, n;
    uint32_t cp;
    while (i < len && (n = nb_utf8_next(s + i, len - i, &cp)) != 0) i += n;
    if (i < len)
        return nb_ctx_fail(ctx, NB_ERR_VALUE,
                           "%s: the text is not valid UTF-8: byte offset %zu (0x%02x) does "
                           "not start a valid sequence",
                           op, i, s[i]);
    return NB_OK;
}

/* The checks every text-taking entry shares: valid, non-empty UTF-8. */
static nb_status check_text(nb_ctx *ctx, const char *op, const char *text, size_t len) {
    nb_status st = nb_utf8_check(ctx, op, text, len);
    if (st) return st;
    if (len == 0) return nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: the text is empty", op);
    return NB_OK;
}

nb_status nb_char_vocab_build(nb_ctx *ctx, const char *text, size_t len, nb_char_vocab *out) {
    static const char op[] = "char_vocab_build";
    if (out) *out = (nb_char_vocab){0};
    if (ctx && nb_ctx_ok(ctx) && !out) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL out", op);
    nb_status st = check_text(ctx, op, text, len);
    if (st) return st;
    uint8_t *seen = calloc(CODE_POINTS / 8, 1);
    if (!seen) return nb_ctx_fail(ctx, NB_ERR_MEMORY, "%s: out of memory", op);
    const unsigned char *s = (const unsigned char *)text;
    uint32_t cp;
    int size = 0;
    for (size_t i = 0; i < len; i += nb_utf8_next(s + i, len - i, &cp)) {
        nb_utf8_next(s + i, len - i, &cp);
        if (!(seen[cp >> 3] >> (cp & 7) & 1)) size++;
        seen[cp >> 3] |= (uint8_t)(1u << (cp & 7));
    }
    uint32_t *chars = nb_ctx_alloc(ctx, (size_t)size * sizeof *chars);
    if (chars) {
        int k = 0;
        for (uint32_t c = 0; c < CODE_POINTS; c++)
            if (seen[c >> 3] >> (c & 7) & 1) chars[k++] = c;
        *out = (nb_char_vocab){size, chars};
    }
    free(seen);
    return nb_ctx_status(ctx);
}

/* The id of cp in v, or -1 (binary search over the sorted code points). */
static int64_t vocab_id(const nb_char_vocab *v, uint32_t cp) {
    int lo = 0, hi = v->size;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (v->chars[mid] < cp) lo = mid + 1;
        else hi = mid;
    }
    return lo < v->size && v->chars[lo] == cp ? lo : -1;
}

static bool vocab_ok(nb_ctx *ctx, const char *op, const nb_char_vocab *v) {
    if (!nb_ctx_ok(ctx)) return false;
    if (!v || !v->chars || v->size < 1) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL or empty vocabulary", op);
        return false;
    }
    return true;
}

nb_tensor *nb_char_encode(nb_ctx *ctx, const nb_char_vocab *v, const char *text, size_t len) {
    static const char op[] = "char_encode";
    if (!vocab_ok(ctx, op, v) || check_text(ctx, op, text, len)) return NULL;
    const unsigned char *s = (const unsigned char *)text;
    uint32_t cp;
    int64_t n = 0;
    for (size_t i = 0; i < len; i += nb_utf8_next(s + i, len - i, &cp)) n++;
    nb_tensor *ids = nb_empty(ctx, NB_I64, 1, &n);
    if (!ids) return NULL;
    int64_t *out = ids->data, k = 0;
    for (size_t i = 0, step; i < len; i += step) {
        step = nb_utf8_next(s + i, len - i, &cp);
        if ((out[k++] = vocab_id(v, cp)) < 0) {
            nb_ctx_fail(ctx, NB_ERR_VALUE,
                        "%s: character U+%04X ('%.*s') at byte offset %zu is not in the "
                        "vocabulary of %d characters",
                        op, (unsigned)cp, (int)step, text + i, i, v->size);
            return NULL;
        }
    }
    return ids;
}

char *nb_char_decode(nb_ctx *ctx, const nb_char_vocab *v, const int64_t *ids, size_t n,
                     size_t *out_len) {
    static const char op[] = "char_decode";
    if (out_len) *out_len = 0;
    if (!vocab_ok(ctx, op, v)) return NULL;
    if (!ids && n) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL ids", op);
        return NULL;
    }
    size_t bytes = 0;
    char tmp[4];
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= v->size) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: id %lld at position %zu is outside 0..%d", op,
                        (long long)ids[i], i, v->size - 1);
            return NULL;
        }
        bytes += nb_utf8_put(v->chars[ids[i]], tmp);
    }
    char *s = nb_ctx_alloc(ctx, bytes + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += nb_utf8_put(v->chars[ids[i]], s + k);
    s[k] = '\0';
    if (out_len) *out_len = k;
    return s;
}

char *nb_char_vocab_to_string(nb_ctx *ctx, const nb_char_vocab *v) {
    if (!vocab_ok(ctx, "char_vocab_to_string", v)) return NULL;
    char *s = nb_ctx_alloc(ctx, (size_t)v->size * 8 + 1); /* "1114111 " at most */
    if (!s) return NULL;
    size_t k = 0;
    for (int i = 0; i < v->size; i++)
        k += (size_t)sprintf(s + k, i ? " %u" : "%u", (unsigned)v->chars[i]);
    return s;
}

nb_status nb_char_vocab_from_string(nb_ctx *ctx, const char *s, nb_char_vocab *out) {
    static const char op[] = "char_vocab_from_string";
    if (!nb_ctx_ok(ctx)) return ctx ? nb_ctx_status(ctx) : NB_ERR_NULL;
    if (!s || !out) return nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL %s", op, s ? "out" : "string");
    *out = (nb_char_vocab){0};
    int size = 0;
    for (const char *p = s; *p; p++) size += *p == ' ';
    uint32_t *chars = nb_ctx_alloc(ctx, ((size_t)size + 1) * sizeof *chars);
    if (!chars) return nb_ctx_status(ctx);
    const char *p = s;
    for (size = 0;; p++) {
        char *end = NULL;
        unsigned long cp = 0;
        errno = 0;
        if (*p >= '0' && *p <= '9') cp = strtoul(p, &end, 10);
        if (!end || errno || cp >= CODE_POINTS || (cp >= 0xd800 && cp <= 0xdfff) ||
            (size > 0 && cp <= chars[size - 1]) || (*end && *end != ' '))
            return nb_ctx_fail(ctx, NB_ERR_FORMAT,
                               "%s: entry %d (at character %td) is not a code point above the "
                               "previous one; expected decimal code points in increasing "
                               "order, separated by single spaces",
                               op, size, p - s);
        chars[size++] = (uint32_t)cp;
        if (!*end) break;
        p = end;
    }
    *out = (nb_char_vocab){size, chars};
    return NB_OK;
}
