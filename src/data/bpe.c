/* bpe.c - GPT-2's byte-level BPE: text to token ids (special tokens, then
 * UTF-8 runs, then PCRE2's pieces, then merges by rank) and ids back to
 * bytes; and printable UTF-8 from any bytes. Loading is in bpe_load.c. */
#include <stdlib.h>

#include "data/data_internal.h"

#define NO_RANK INT32_MAX

/* One encode call's state: the ids so far and the merge buffers (malloc'd,
 * grown as needed, freed at the end), PCRE2's match data. */
typedef struct enc {
    nb_ctx *ctx;
    const nb_bpe *t;
    int64_t *ids;
    size_t n, cap;
    int32_t *part, *merged, *rank; /* a piece's parts and, per neighbour pair, its merge */
    int32_t *next, *prev;          /* the heap path's list of parts (by byte offset) */
    struct heap_entry *heap;
    size_t work_cap;               /* bytes of piece the buffers hold */
    pcre2_match_data *md;
} enc;

/* A pair of neighbouring parts on the heap: the part starting at `pos`
 * with the one starting at `right`, which ends at `end`. Stale once either
 * changed: then pos is gone, next[pos] != right or the right part's end
 * moved. */
typedef struct heap_entry {
    int32_t rank, pos, right, end;
} heap_entry;

static bool enc_fail_memory(enc *e) {
    nb_ctx_fail(e->ctx, NB_ERR_MEMORY, "bpe_encode: out of memory");
    return false;
}

static bool push(enc *e, int32_t id) {
    if (e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 1024;
        int64_t *p = realloc(e->ids, cap * sizeof *p);
        if (!p) return enc_fail_memory(e);
        e->ids = p, e->cap = cap;
    }
    e->ids[e->n++] = id;
    return true;
}

/* Room in the merge buffers for a piece of n bytes. */
static bool reserve_work(enc *e, size_t n) {
    if (n <= e->work_cap) return true;
    size_t cap = e->work_cap ? e->work_cap : 256;
    while (cap < n) cap *= 2;
    if (cap > INT32_MAX / 4) return enc_fail_memory(e);
    int32_t **arrays[] = {&e->part, &e->merged, &e->rank, &e->next, &e->prev};
    for (size_t k = 0; k < sizeof arrays / sizeof arrays[0]; k++) {
        int32_t *p = realloc(*arrays[k], cap * sizeof *p);
        if (!p) return enc_fail_memory(e);
        *arrays[k] = p;
    }
    heap_entry *h = realloc(e->heap, 3 * cap * sizeof *h);
    if (!h) return enc_fail_memory(e);
    e->heap = h, e->work_cap = cap;
    return true;
}

/* The merge of parts a and b: its rank (NO_RANK when they do not merge)
 * and, through *merged, the token they make. */
static inline int32_t pair_rank(const nb_bpe *t, int32_t a, int32_t b, int32_t *merged) {
    const nb_bpe_pair *p = nb_bpe_pair_find(t, a, b);
    if (!p) return NO_RANK;
    *merged = p->merged;
    return p->rank;
}

/* The scan path, for short pieces: each round scans the pairs for the
 * lowest rank (the leftmost on a tie), joins that pair and re-ranks its
 * two new neighbour pairs. */
static bool merge_scan(enc *e, const uint8_t *p, size_t n) {
    const nb_bpe *t = e->t;
    int32_t *part = e->part, *rank = e->rank, *merged = e->merged;
    size_t m = n;
    for (size_t i = 0; i < n; i++) part[i] = t->byte_id[p[i]];
    for (size_t i = 0; i + 1 < m; i++) rank[i] = pair_rank(t, part[i], part[i + 1], &merged[i]);
    for (;;) {
        int32_t best = NO_RANK;
        size_t at = 0;
        for (size_t i = 0; i + 1 < m; i++)
            if (rank[i] < best) best = rank[i], at = i;
        if (best == NO_RANK) break;
        part[at] = merged[at];
        m--;
        memmove(part + at + 1, part + at + 2, (m - at - 1) * sizeof *part);
        if (at + 1 < m) {
            memmove(rank + at + 1, rank + at + 2, (m - at - 2) * sizeof *rank);
            memmove(merged + at + 1, merged + at + 2, (m - at - 2) * sizeof *merged);
        }
        if (at > 0) rank[at - 1] = pair_rank(t, part[at - 1], part[at], &merged[at - 1]);
        if (at + 1 < m) rank[at] = pair_rank(t, part[at], part[at + 1], &merged[at]);
    }
    for (size_t i = 0; i < m; i++)
        if (!push(e, part[i])) return false;
    return true;
}

static inline bool heap_less(const heap_entry *a, const heap_entry *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->pos < b->pos);
}

static void heap_push(heap_entry *h, size_t *size, heap_entry x) {
    size_t i = (*size)++;
    while (i > 0 && heap_less(&x, &h[(i - 1) / 2])) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = x;
}

static heap_entry heap_pop(heap_entry *h, size_t *size) {
    heap_entry top = h[0], x = h[--*size];
    size_t i = 0, n = *size;
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && heap_less(&h[c + 1], &h[c])) c++;
        if (!heap_less(&h[c], &x)) break;
        h[i] = h[c];
    }
    if (n) h[i] = x;
    return top;
}

/* Puts the pair (part at a, the part after it) on the heap if it merges. */
static void heap_offer(enc *e, size_t *size, int32_t a, int32_t n) {
    int32_t b = e->next[a], dummy;
    if (b >= n) return;
    int32_t r = pair_rank(e->t, e->part[a], e->part[b], &dummy);
    if (r != NO_RANK) heap_push(e->heap, size, (heap_entry){r, a, b, e->next[b]});
}

/* The heap path, for long pieces: the same merges in the same order as
 * merge_scan (the lowest rank, then the leftmost), in O(n log n). Parts
 * are a list indexed by their first byte's offset; part[i] < 0 for an
 * offset inside a part. */
static bool merge_heap(enc *e, const uint8_t *p, size_t len) {
    int32_t n = (int32_t)len, *part = e->part, *next = e->next, *prev = e->prev;
    size_t size = 0;
    for (int32_t i = 0; i < n; i++)
        part[i] = e->t->byte_id[p[i]], next[i] = i + 1, prev[i] = i - 1;
    for (int32_t i = 0; i + 1 < n; i++) heap_offer(e, &size, i, n);
    while (size) {
        heap_entry x = heap_pop(e->heap, &size);
        if (part[x.pos] < 0 || next[x.pos] != x.right || next[x.right] != x.end) continue;
        int32_t merged = -1;
        pair_rank(e->t, part[x.pos], part[x.right], &merged);
        part[x.pos] = merged, part[x.right] = -1;
        next[x.pos] = x.end;
        if (x.end < n) prev[x.end] = x.pos;
        if (prev[x.pos] >= 0) heap_offer(e, &size, prev[x.pos], n);
        heap_offer(e, &size, x.pos, n);
    }
    for (int32_t i = 0; i < n; i = next[i])
        if (!push(e, part[i])) return false;
    return true;
}

/* One piece's tokens: the token it is, else its bytes merged. */
static bool encode_piece(enc *e, const uint8_t *p, size_t n) {
    const nb_bpe *t = e->t;
    if (n == 1) return push(e, t->byte_id[p[0]]);
    int32_t id = nb_bpe_lookup(t, p, n);
    if (id >= 0 && t->kind[id] != NB_BPE_SPECIAL) return push(e, id);
    if (!reserve_work(e, n)) return false;
    return n >= t->heap_min ? merge_heap(e, p, n) : merge_scan(e, p, n);
}

/* Valid UTF-8 s[0..n) cut by GPT-2's pattern, each piece encoded. The
 * pattern matches every character, so each match starts where the last
 * ended; anything it skipped would still be encoded, as one piece. */
static bool encode_valid(enc *e, const uint8_t *s, size_t n) {
    size_t at = 0;
    while (at < n) {
        int rc = pcre2_match(e->t->re, s, n, at, PCRE2_NO_UTF_CHECK, e->md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return encode_piece(e, s + at, n - at);
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            nb_ctx_fail(e->ctx, NB_ERR_STATE, "bpe_encode: PCRE2 failed at byte %zu: %s", at,
                        (const char *)msg);
            return false;
        }
        const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        if (ov[0] > at && !encode_piece(e, s + at, ov[0] - at)) return false;
        if (!encode_piece(e, s + ov[0], ov[1] - ov[0])) return false;
        at = ov[1];
    }
    return true;
}

/* The length of the valid UTF-8 that starts s[0..n). */
static size_t valid_prefix(const uint8_t *s, size_t n) {
    size_t i = 0, step;
    uint32_t cp;
    while (i < n) {
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if (!(step = nb_utf8_next(s + i, n - i, &cp))) break;
        i += step;
    }
    return i;
}

/* Text with no special tokens: valid UTF-8 runs through the pattern, each
 * run of bytes that start no valid sequence as one piece. */
static bool encode_ordinary(enc *e, const uint8_t *s, size_t n) {
    uint32_t cp;
    for (size_t at = 0; at < n;) {
        size_t ok = valid_prefix(s + at, n - at);
        if (ok && !encode_valid(e, s + at, ok)) return false;
        at += ok;
        size_t bad = 0;
        while (at + bad < n && !nb_utf8_next(s + at + bad, n - at - bad, &cp)) bad++;
        if (bad && !encode_piece(e, s + at, bad)) return false;
        at += bad;
    }
    return true;
}

/* Where needle[0..m) (m >= 1) first occurs in s[from..n), or n. */
static size_t find(const uint8_t *s, size_t n, size_t from, const uint8_t *needle, size_t m) {
    while (from + m <= n) {
        const uint8_t *hit = memchr(s + from, needle[0], n - m + 1 - from);
        if (!hit) break;
        from = (size_t)(hit - s);
        if (!memcmp(hit, needle, m)) return from;
        from++;
    }
    return n;
}

/* The first special token's text in s[from..n) (the longest at the
 * earliest position): its offset, with *id its token; n when there is
 * none. next[k] is where special k was last found (SIZE_MAX: not looked
 * for yet); it is looked for again once `from` has passed it. */
static size_t next_special(const nb_bpe *t, const uint8_t *s, size_t n, size_t from,
                           size_t *next, int32_t *id) {
    size_t best = n;
    for (int32_t k = 0; k < t->n_special; k++) {
        int32_t sp = t->special[k];
        if (next[k] == SIZE_MAX || next[k] < from)
            next[k] = find(s, n, from, t->bytes + t->off[sp], t->len[sp]);
        if (next[k] < best) best = next[k], *id = sp; /* longest first: a tie keeps the longer */
    }
    return best;
}

/* tiktoken's encode with every special token allowed: the text between
 * special tokens' texts encoded as ordinary text, each special its id. */
static bool encode_with_specials(enc *e, const uint8_t *s, size_t n) {
    const nb_bpe *t = e->t;
    size_t *next = malloc(((size_t)t->n_special + 1) * sizeof *next);
    if (!next) return enc_fail_memory(e);
    for (int32_t k = 0; k < t->n_special; k++) next[k] = SIZE_MAX;
    bool ok = true;
    for (size_t at = 0, first; ok && at < n; at = first) {
        int32_t id = -1;
        first = next_special(t, s, n, at, next, &id);
        ok = first == at || encode_ordinary(e, s + at, first - at);
        if (ok && first < n) ok = push(e, id), first += t->len[id];
    }
    free(next);
    return ok;
}

static bool bpe_ok(nb_ctx *ctx, const char *op, const nb_bpe *t) {
    if (!nb_ctx_ok(ctx)) return false;
    if (!t) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL tokenizer", op);
        return false;
    }
    return true;
}

nb_tensor *nb_bpe_encode(nb_ctx *ctx, const nb_bpe *t, const char *text, size_t len,
                         bool allow_special) {
    static const char op[] = "bpe_encode";
    if (!bpe_ok(ctx, op, t)) return NULL;
    if (!text) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL text", op);
        return NULL;
    }
    if (len == 0) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: the text is empty (a tensor has at least one element)",
                    op);
        return NULL;
    }
    enc e = {.ctx = ctx, .t = t};
    e.md = pcre2_match_data_create_from_pattern(t->re, NULL);
    bool ok = e.md ? true : enc_fail_memory(&e);
    const uint8_t *s = (const uint8_t *)text;
    if (ok) ok = allow_special && t->n_special ? encode_with_specials(&e, s, len)
                                                : encode_ordinary(&e, s, len);
    nb_tensor *ids = NULL;
    if (ok) {
        int64_t n = (int64_t)e.n;
        if ((ids = nb_empty(ctx, NB_I64, 1, &n)) != NULL)
            memcpy(ids->data, e.ids, e.n * sizeof *e.ids);
    }
    if (e.md) pcre2_match_data_free(e.md);
    free(e.ids), free(e.part), free(e.merged), free(e.rank), free(e.next), free(e.prev);
    free(e.heap);
    return ids;
}

char *nb_bpe_decode(nb_ctx *ctx, const nb_bpe *t, const int64_t *ids, size_t n, size_t *len) {
    static const char op[] = "bpe_decode";
    if (len) *len = 0;
    if (!bpe_ok(ctx, op, t)) return NULL;
    if (!ids && n) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "%s: NULL ids", op);
        return NULL;
    }
    size_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->n) {
            nb_ctx_fail(ctx, NB_ERR_VALUE, "%s: id %lld at position %zu is outside 0..%d", op,
                        (long long)ids[i], i, (int)t->n - 1);
            return NULL;
        }
        bytes += t->len[ids[i]];
    }
    char *out = nb_ctx_alloc_raw(ctx, bytes + 1);
    if (!out) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        memcpy(out + k, t->bytes + t->off[ids[i]], t->len[ids[i]]);
        k += t->len[ids[i]];
    }
    out[k] = '\0';
    if (len) *len = k;
    return out;
}

/* How many bytes of s[0..n) (s[0] starting no valid sequence) one U+FFFD
 * replaces: the longest start of a valid sequence there (a lead byte and
 * the continuation bytes it allows), at least 1. */
static size_t maximal_subpart(const uint8_t *s, size_t n) {
    uint8_t b = s[0], lo = 0x80, hi = 0xbf;
    size_t need;
    if (b >= 0xc2 && b <= 0xdf) need = 1;
    else if (b >= 0xe0 && b <= 0xef) need = 2, lo = b == 0xe0 ? 0xa0 : 0x80, hi = b == 0xed ? 0x9f : 0xbf;
    else if (b >= 0xf0 && b <= 0xf4) need = 3, lo = b == 0xf0 ? 0x90 : 0x80, hi = b == 0xf4 ? 0x8f : 0xbf;
    else return 1;
    size_t k = 1;
    while (k <= need && k < n && s[k] >= (k == 1 ? lo : 0x80) && s[k] <= (k == 1 ? hi : 0xbf)) k++;
    return k;
}

/* Writes text as display UTF-8 into out (when not NULL); returns its length. */
static size_t display(const uint8_t *s, size_t n, char *out) {
    size_t k = 0, step;
    uint32_t cp;
    for (size_t i = 0; i < n; i += step) {
        if ((step = nb_utf8_next(s + i, n - i, &cp)) != 0) {
            if (out) memcpy(out + k, s + i, step);
            k += step;
        } else {
            step = maximal_subpart(s + i, n - i);
            if (out) memcpy(out + k, "\xef\xbf\xbd", 3);
            k += 3;
        }
    }
    return k;
}

char *nb_utf8_display(nb_ctx *ctx, const char *text, size_t len, size_t *out_len) {
    if (out_len) *out_len = 0;
    if (!nb_ctx_ok(ctx)) return NULL;
    if (!text && len) {
        nb_ctx_fail(ctx, NB_ERR_NULL, "utf8_display: NULL text");
        return NULL;
    }
    const uint8_t *s = (const uint8_t *)text;
    size_t n = display(s, len, NULL);
    char *out = nb_ctx_alloc_raw(ctx, n + 1);
    if (!out) return NULL;
    display(s, len, out);
    out[n] = '\0';
    if (out_len) *out_len = n;
    return out;
}
