/* bpe_load.c - GPT-2's tokenizer files into an nb_bpe: the vocabulary (a
 * JSON object of token -> id, OpenAI's encoder.json or Hugging Face's
 * vocab.json), the merges (vocab.bpe or merges.txt, one "a b" a line), the
 * byte alphabet both are written in, the hash tables encoding looks tokens
 * and pairs up in, and the pre-tokenizer's pattern. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include <cjson/cJSON.h>

#include "data/data_internal.h"

#define OP "bpe_load"
#define MAX_FILE ((size_t)1 << 30) /* 1 GiB: GPT-2's files are 1 MB and 0.5 MB */
#define MAX_TOKENS (1 << 26)
#define SHOWN 40 /* bytes of a token or line quoted in a message */

/* GPT-2's pre-tokenizer, tiktoken's "gpt2" pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * with \s spelled out as tiktoken's regex engine has it, Unicode's
 * White_Space property (these 25 code points since Unicode 6.3). PCRE2's
 * \s also matches U+180E MONGOLIAN VOWEL SEPARATOR, which was a space
 * before 6.3; a check over every code point found no other difference in
 * \s, \p{L} or \p{N} but characters newer than PCRE2's Unicode tables. */
#define WS "\\t\\n\\x0b\\f\\r \\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}" \
           "\\x{205f}\\x{3000}"
static const char PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|"
                              "[" WS "]+(?![^" WS "])|[" WS "]+";

/* Records "bpe_load: PATH: <message>" with status s; returns s. */
static nb_status file_fail(nb_ctx *ctx, nb_status s, const char *path, const char *fmt, ...)
    NB_PRINTF_LIKE(4, 5);
static nb_status file_fail(nb_ctx *ctx, nb_status s, const char *path, const char *fmt, ...) {
    char msg[NB_ERRMSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nb_ctx_fail(ctx, s, OP ": %s: %s", path, msg);
}

/* The whole file, NUL-terminated, in a malloc'd buffer (*len bytes before
 * the NUL); NULL with an error naming the file. */
static char *read_all(nb_ctx *ctx, const char *path, size_t *len) {
    const char *why = NULL;
    FILE *f = nb_fopen_regular(path, &why);
    if (!f) {
        file_fail(ctx, NB_ERR_IO, path, "cannot open: %s", why);
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 1 >= cap) {
            size_t want = cap ? 2 * cap : 1 << 16;
            char *p = want <= MAX_FILE + 1 ? realloc(buf, want) : NULL;
            if (!p) {
                file_fail(ctx, want > MAX_FILE + 1 ? NB_ERR_FORMAT : NB_ERR_MEMORY, path,
                          want > MAX_FILE + 1 ? "larger than 1 GiB" : "out of memory");
                break;
            }
            buf = p, cap = want;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) file_fail(ctx, NB_ERR_IO, path, "read error");
            break;
        }
    }
    fclose(f);
    if (!nb_ctx_ok(ctx)) {
        free(buf);
        return NULL;
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

/* GPT-2's byte alphabet: the bytes '!'..'~', 0xA1..0xAC and 0xAE..0xFF
 * stand for the code points of the same number; the other 68 bytes, in
 * increasing order, for U+0100, U+0101, ..., U+0143 (a space is U+0120).
 * byte_of[cp] is the byte U+cp stands for, or -1. */
#define ALPHABET_END 0x144
static void byte_alphabet(int16_t byte_of[ALPHABET_END]) {
    for (int cp = 0; cp < ALPHABET_END; cp++) byte_of[cp] = -1;
    int next = 256;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        byte_of[self ? b : next++] = (int16_t)b;
    }
}

/* Decodes a token written in the byte alphabet (s[0..n), UTF-8) into out
 * (room for n bytes); returns the byte count, or 0 when s is empty, not
 * UTF-8 or has a character outside the alphabet (*bad gets it, or
 * 0xFFFFFFFF for bad UTF-8). */
static size_t alphabet_decode(const int16_t *byte_of, const char *s, size_t n, uint8_t *out,
                              uint32_t *bad) {
    size_t k = 0, step;
    uint32_t cp;
    for (size_t i = 0; i < n; i += step) {
        step = nb_utf8_next((const unsigned char *)s + i, n - i, &cp);
        if (!step) cp = 0xffffffffu;
        if (!step || cp >= ALPHABET_END || byte_of[cp] < 0) {
            *bad = cp;
            return 0;
        }
        out[k++] = (uint8_t)byte_of[cp];
    }
    *bad = 0;
    return k;
}

static nb_status bad_token(nb_ctx *ctx, const char *path, const char *what, const char *tok,
                           uint32_t bad) {
    if (!*tok)
        return file_fail(ctx, NB_ERR_FORMAT, path, "%s is empty", what);
    if (bad == 0xffffffffu)
        return file_fail(ctx, NB_ERR_FORMAT, path, "%s \"%.*s\" is not valid UTF-8", what, SHOWN,
                         tok);
    return file_fail(ctx, NB_ERR_FORMAT, path,
                     "%s \"%.*s\" has the character U+%04X, which is not one of the byte "
                     "alphabet's 256 (a byte-level BPE file writes each byte as one character)",
                     what, SHOWN, tok, (unsigned)bad);
}

/* The vocabulary: fills n, bytes, off, len (by id) from the JSON object. */
static nb_status load_vocab(nb_ctx *ctx, nb_bpe *t, const int16_t *byte_of, const char *path,
                            const cJSON *root) {
    if (!cJSON_IsObject(root))
        return file_fail(ctx, NB_ERR_FORMAT, path, "expected a JSON object of token -> id");
    size_t count = 0, total = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) count++, total += strlen(it->string);
    if (count == 0 || count > MAX_TOKENS)
        return file_fail(ctx, NB_ERR_FORMAT, path, "has %zu tokens, expected 256 to %d", count,
                         MAX_TOKENS);
    t->n = (int32_t)count;
    t->bytes = malloc(total ? total : 1);
    t->off = malloc(count * sizeof *t->off);
    t->len = calloc(count, sizeof *t->len);
    if (!t->bytes || !t->off || !t->len)
        return file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
    const char **name = calloc(count, sizeof *name); /* the token of each id, as written */
    if (!name) return file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
    size_t used = 0;
    cJSON_ArrayForEach(it, root) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        if (!(v >= 0 && v < (double)count && v == (double)(int64_t)v)) {
            char shown[48] = "an id that is not a number";
            if (cJSON_IsNumber(it)) snprintf(shown, sizeof shown, "the id %.17g", v);
            file_fail(ctx, NB_ERR_FORMAT, path,
                      "token \"%.*s\" has %s; ids are whole numbers 0..%zu (the file "
                      "has %zu tokens), each used once",
                      SHOWN, it->string, shown, count - 1, count);
            break;
        }
        int32_t id = (int32_t)v;
        if (name[id]) {
            file_fail(ctx, NB_ERR_FORMAT, path, "tokens \"%.*s\" and \"%.*s\" both have id %d",
                      SHOWN, name[id], SHOWN, it->string, (int)id);
            break;
        }
        name[id] = it->string;
        uint32_t bad;
        size_t n = alphabet_decode(byte_of, it->string, strlen(it->string), t->bytes + used, &bad);
        if (!n) {
            bad_token(ctx, path, "the token", it->string, bad);
            break;
        }
        t->off[id] = (uint32_t)used, t->len[id] = (uint32_t)n;
        used += n;
    }
    free(name);
    return nb_ctx_status(ctx);
}

/* The token table (every token by its bytes) and each byte's token. */
static nb_status index_tokens(nb_ctx *ctx, nb_bpe *t, const char *path) {
    uint32_t cap = 1024;
    while (cap < 2u * (uint32_t)t->n) cap *= 2;
    t->tok_mask = cap - 1;
    t->tokens = malloc(cap * sizeof *t->tokens);
    if (!t->tokens) return file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
    for (uint32_t i = 0; i < cap; i++) t->tokens[i] = (nb_bpe_slot){0, -1};
    for (int32_t id = 0; id < t->n; id++) {
        const uint8_t *p = t->bytes + t->off[id];
        int32_t same = nb_bpe_lookup(t, p, t->len[id]);
        if (same >= 0)
            return file_fail(ctx, NB_ERR_FORMAT, path,
                             "ids %d and %d are the same token (%u bytes starting 0x%02x)",
                             (int)same, (int)id, (unsigned)t->len[id], p[0]);
        uint64_t h = nb_bpe_hash(p, t->len[id]);
        uint32_t i = (uint32_t)h & t->tok_mask;
        while (t->tokens[i].id >= 0) i = (i + 1) & t->tok_mask;
        t->tokens[i] = (nb_bpe_slot){(uint32_t)(h >> 32), id};
        if (t->len[id] == 1) t->kind[id] = NB_BPE_BYTE;
    }
    for (int b = 0; b < 256; b++) {
        uint8_t c = (uint8_t)b;
        if ((t->byte_id[b] = nb_bpe_lookup(t, &c, 1)) < 0)
            return file_fail(ctx, NB_ERR_FORMAT, path,
                             "no token is the byte 0x%02x; a byte-level vocabulary has all 256",
                             (unsigned)b);
    }
    return NB_OK;
}

/* One merges line (NUL-terminated, no newline): "a b", a merge of rank
 * `rank` whose tokens and result must be in the vocabulary. */
static nb_status merge_line(nb_ctx *ctx, nb_bpe *t, const int16_t *byte_of, const char *path,
                            int line, char *s, int32_t rank, uint8_t *buf) {
    char *space = strchr(s, ' ');
    if (!space || space == s || !space[1] || strchr(space + 1, ' '))
        return file_fail(ctx, NB_ERR_FORMAT, path,
                         "line %d (\"%.*s\") is not two tokens separated by one space", line,
                         SHOWN, s);
    *space = '\0';
    const char *side[2] = {s, space + 1};
    size_t n[2];
    int32_t id[2];
    for (int k = 0; k < 2; k++) {
        uint32_t bad;
        n[k] = alphabet_decode(byte_of, side[k], strlen(side[k]), buf + (k ? n[0] : 0), &bad);
        if (!n[k]) return bad_token(ctx, path, k ? "the second token" : "the first token",
                                    side[k], bad);
        id[k] = nb_bpe_lookup(t, buf + (k ? n[0] : 0), n[k]);
        if (id[k] < 0)
            return file_fail(ctx, NB_ERR_FORMAT, path,
                             "line %d merges \"%.*s\" and \"%.*s\", but \"%.*s\" is not a token "
                             "of the vocabulary",
                             line, SHOWN, side[0], SHOWN, side[1], SHOWN, side[k]);
    }
    int32_t merged = nb_bpe_lookup(t, buf, n[0] + n[1]);
    if (merged < 0)
        return file_fail(ctx, NB_ERR_FORMAT, path,
                         "line %d merges \"%.*s\" and \"%.*s\" into \"%.*s%.*s\", which is not a "
                         "token of the vocabulary",
                         line, SHOWN, side[0], SHOWN, side[1], SHOWN, side[0], SHOWN, side[1]);
    if (t->rank[merged] < 0) t->rank[merged] = rank, t->kind[merged] = NB_BPE_MERGED;
    return NB_OK;
}

/* The merges file: each merged token's rank (its first line's number among
 * the merges) and kind. */
static nb_status load_merges(nb_ctx *ctx, nb_bpe *t, const int16_t *byte_of, const char *path) {
    size_t size;
    char *text = read_all(ctx, path, &size);
    if (!text) return nb_ctx_status(ctx);
    uint8_t *buf = malloc(size + 1);
    if (!buf) {
        free(text);
        return file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
    }
    int32_t rank = 0;
    int line = 0;
    for (char *s = text, *next; s < text + size && nb_ctx_ok(ctx); s = next) {
        char *nl = memchr(s, '\n', (size_t)(text + size - s));
        next = nl ? nl + 1 : text + size;
        char *end = nl ? nl : text + size;
        if (end > s && end[-1] == '\r') end--;
        *end = '\0';
        line++;
        if (memchr(s, '\0', (size_t)(end - s)) != NULL)
            file_fail(ctx, NB_ERR_FORMAT, path, "line %d has a NUL byte", line);
        else if ((line == 1 && !strncmp(s, "#version", 8)) || s == end)
            continue;
        else if (rank == INT32_MAX)
            file_fail(ctx, NB_ERR_FORMAT, path, "too many merges");
        else if (!merge_line(ctx, t, byte_of, path, line, s, rank, buf))
            rank++;
    }
    free(buf);
    free(text);
    return nb_ctx_status(ctx);
}

/* The pair table: every way a merged token splits into two tokens that are
 * not special, as (left, right) -> merged. Encoding joins two neighbours
 * exactly when their bytes together are a merged token, as tiktoken does. */
static nb_status index_pairs(nb_ctx *ctx, nb_bpe *t, const char *path) {
    size_t count = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            uint32_t cap = 1024;
            while (cap < 2 * count) cap *= 2;
            t->pair_mask = cap - 1;
            t->pairs = malloc(cap * sizeof *t->pairs);
            if (!t->pairs) return file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
            for (uint32_t i = 0; i < cap; i++) t->pairs[i] = (nb_bpe_pair){-1, -1, -1, -1};
        }
        for (int32_t m = 0; m < t->n; m++) {
            if (t->kind[m] != NB_BPE_MERGED) continue;
            const uint8_t *p = t->bytes + t->off[m];
            for (uint32_t k = 1; k < t->len[m]; k++) {
                int32_t l = nb_bpe_lookup(t, p, k), r = nb_bpe_lookup(t, p + k, t->len[m] - k);
                if (l < 0 || r < 0 || t->kind[l] == NB_BPE_SPECIAL || t->kind[r] == NB_BPE_SPECIAL)
                    continue;
                if (pass == 0) {
                    count++;
                    continue;
                }
                uint32_t i = nb_bpe_pair_hash(l, r) & t->pair_mask;
                while (t->pairs[i].left >= 0) i = (i + 1) & t->pair_mask;
                t->pairs[i] = (nb_bpe_pair){l, r, m, t->rank[m]};
            }
        }
    }
    return NB_OK;
}

/* The special tokens (neither a byte nor merged), longest first. */
static nb_status find_specials(nb_ctx *ctx, nb_bpe *t, const char *path) {
    for (int32_t id = 0; id < t->n; id++)
        if (!t->kind[id]) t->kind[id] = NB_BPE_SPECIAL, t->n_special++;
    t->special = malloc(((size_t)t->n_special + 1) * sizeof *t->special);
    if (!t->special) return file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
    int32_t k = 0;
    for (int32_t id = 0; id < t->n; id++)
        if (t->kind[id] == NB_BPE_SPECIAL) t->special[k++] = id;
    /* insertion sort: a vocabulary has a handful of special tokens */
    for (int32_t i = 1; i < k; i++)
        for (int32_t j = i; j > 0 && t->len[t->special[j]] > t->len[t->special[j - 1]]; j--) {
            int32_t s = t->special[j];
            t->special[j] = t->special[j - 1], t->special[j - 1] = s;
        }
    return NB_OK;
}

/* The pre-tokenizer: PCRE2 in UTF mode with Unicode classes, JIT-compiled
 * where PCRE2 has a JIT for this machine (else interpreted: slower, same
 * pieces). */
static nb_status compile_pattern(nb_ctx *ctx, nb_bpe *t) {
    int err;
    PCRE2_SIZE at;
    t->re = pcre2_compile((PCRE2_SPTR)PATTERN, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err,
                          &at, NULL);
    if (!t->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return nb_ctx_fail(ctx, NB_ERR_STATE, OP ": PCRE2 cannot compile GPT-2's pattern: %s",
                           (const char *)msg);
    }
    pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE);
    return NB_OK;
}

/* The vocabulary file into t (n, the tokens' bytes and both tables). */
static nb_status read_vocab(nb_ctx *ctx, nb_bpe *t, const int16_t *byte_of, const char *path) {
    size_t size;
    char *text = read_all(ctx, path, &size);
    if (!text) return nb_ctx_status(ctx);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, size, &end, false);
    if (!root) {
        size_t at = end && end >= text && end <= text + size ? (size_t)(end - text) : 0;
        file_fail(ctx, NB_ERR_FORMAT, path, "not JSON (the parser stopped at byte %zu of %zu)", at,
                  size);
    } else {
        while (end && end < text + size && *end && strchr(" \t\r\n", *end)) end++;
        if (end && end < text + size)
            file_fail(ctx, NB_ERR_FORMAT, path, "not JSON: something follows the object at byte %zu",
                      (size_t)(end - text));
        else if (!load_vocab(ctx, t, byte_of, path, root)) {
            t->kind = calloc((size_t)t->n, 1);
            t->rank = malloc((size_t)t->n * sizeof *t->rank);
            if (!t->kind || !t->rank) file_fail(ctx, NB_ERR_MEMORY, path, "out of memory");
            else for (int32_t i = 0; i < t->n; i++) t->rank[i] = -1;
            if (nb_ctx_ok(ctx)) index_tokens(ctx, t, path);
        }
    }
    cJSON_Delete(root);
    free(text);
    return nb_ctx_status(ctx);
}

nb_bpe *nb_bpe_load(nb_ctx *ctx, const char *vocab_path, const char *merges_path) {
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!vocab_path || !merges_path) {
        nb_ctx_fail(ctx, NB_ERR_NULL, OP ": NULL %s path", vocab_path ? "merges" : "vocabulary");
        return NULL;
    }
    nb_bpe *t = calloc(1, sizeof *t);
    if (!t) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, OP ": out of memory");
        return NULL;
    }
    t->heap_min = NB_BPE_HEAP_MIN;
    int16_t byte_of[ALPHABET_END];
    byte_alphabet(byte_of);
    if (!read_vocab(ctx, t, byte_of, vocab_path) && !load_merges(ctx, t, byte_of, merges_path) &&
        !find_specials(ctx, t, merges_path) && !index_pairs(ctx, t, merges_path))
        compile_pattern(ctx, t);
    if (!nb_ctx_ok(ctx)) {
        nb_bpe_free(t);
        return NULL;
    }
    return t;
}

void nb_bpe_free(nb_bpe *t) {
    if (!t) return;
    if (t->re) pcre2_code_free(t->re);
    free(t->bytes), free(t->off), free(t->len), free(t->kind), free(t->rank);
    free(t->tokens), free(t->pairs), free(t->special);
    free(t);
}

int64_t nb_bpe_vocab_size(const nb_bpe *t) { return t ? t->n : 0; }

int64_t nb_bpe_token_id(const nb_bpe *t, const char *text) {
    if (!t || !text) return -1;
    return nb_bpe_lookup(t, (const uint8_t *)text, strlen(text));
}
