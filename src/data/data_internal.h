/* data/data_internal.h - what the data layer's files share and users do not
 * see: the BPE tokenizer's record (built by bpe_load.c, used by bpe.c) and
 * its two hash tables. It includes only the core layer's private header. */
#ifndef NB_DATA_INTERNAL_H
#define NB_DATA_INTERNAL_H

#include "nabla/data.h"
#include "core/core_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

/* What a token is: one byte, made by a merge, or special (neither). */
enum { NB_BPE_BYTE = 1, NB_BPE_MERGED = 2, NB_BPE_SPECIAL = 3 };

/* The pair table's slot: the tokens `left` and `right` side by side join
 * into `merged`, whose rank is `rank`. left < 0 marks an empty slot. */
typedef struct nb_bpe_pair {
    int32_t left, right, merged, rank;
} nb_bpe_pair;

/* The token table's slot: id < 0 marks an empty slot; hash is the upper
 * half of the token's bytes' hash (compared before the bytes). */
typedef struct nb_bpe_slot {
    uint32_t hash;
    int32_t id;
} nb_bpe_slot;

struct nb_bpe {
    int32_t n;            /* tokens; ids are 0..n-1 */
    uint8_t *bytes;       /* every token's bytes, back to back */
    uint32_t *off, *len;  /* (n) token id's bytes are bytes[off[id] .. off[id] + len[id]) */
    uint8_t *kind;        /* (n) NB_BPE_BYTE, _MERGED or _SPECIAL */
    int32_t *rank;        /* (n) a merged token's rank (its first merges line), else -1 */
    int32_t byte_id[256]; /* the token of each byte */
    nb_bpe_slot *tokens;  /* bytes -> id, every token; tok_mask + 1 slots */
    uint32_t tok_mask;
    nb_bpe_pair *pairs;   /* (left, right) -> merged: every split of a merged token into two
                             non-special tokens; pair_mask + 1 slots */
    uint32_t pair_mask;
    int32_t *special;     /* (n_special) ids of the special tokens, longest first */
    int32_t n_special;
    pcre2_code *re;       /* the pre-tokenizer's pattern, JIT-compiled when possible */
    /* Pieces of at least this many bytes merge with a heap (O(n log n)),
     * shorter ones with a scan per merge (O(n^2), faster when short). The
     * tests set it to 2 or SIZE_MAX to run every piece through one way. */
    size_t heap_min;
};

#define NB_BPE_HEAP_MIN 128

/* The hash of n bytes (64-bit; its low bits pick a slot, the high 32 are
 * stored in nb_bpe_slot). */
static inline uint64_t nb_bpe_hash(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325u ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3u;
    return h ^ h >> 29;
}

/* The id of the token whose bytes are p[0..n) (h: their nb_bpe_hash), or -1. */
static inline int32_t nb_bpe_lookup_hashed(const nb_bpe *t, const uint8_t *p, size_t n,
                                           uint64_t h) {
    uint32_t hi = (uint32_t)(h >> 32);
    for (uint32_t i = (uint32_t)h & t->tok_mask;; i = (i + 1) & t->tok_mask) {
        const nb_bpe_slot *s = &t->tokens[i];
        if (s->id < 0) return -1;
        if (s->hash == hi && t->len[s->id] == n && !memcmp(t->bytes + t->off[s->id], p, n))
            return s->id;
    }
}

/* The id of the token whose bytes are p[0..n), or -1. */
static inline int32_t nb_bpe_lookup(const nb_bpe *t, const uint8_t *p, size_t n) {
    return nb_bpe_lookup_hashed(t, p, n, nb_bpe_hash(p, n));
}

static inline uint32_t nb_bpe_pair_hash(int32_t left, int32_t right) {
    uint64_t k = ((uint64_t)(uint32_t)left << 32 | (uint32_t)right) * 0x9e3779b97f4a7c15u;
    return (uint32_t)(k >> 32);
}

/* The pair (left, right)'s slot, or NULL when the two do not merge. */
static inline const nb_bpe_pair *nb_bpe_pair_find(const nb_bpe *t, int32_t left, int32_t right) {
    for (uint32_t i = nb_bpe_pair_hash(left, right) & t->pair_mask;; i = (i + 1) & t->pair_mask) {
        const nb_bpe_pair *p = &t->pairs[i];
        if (p->left < 0) return NULL;
        if (p->left == left && p->right == right) return p;
    }
}

#endif
