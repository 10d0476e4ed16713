/* gpt_pickle.c - meta.pkl's strict reader and its writer (gpt_pickle.h). */
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt_pickle.h"

#define MAX_FILE (16u << 20)

enum { V_INT, V_STR, V_DICT, V_MARK };
typedef struct value {
    int type;
    int64_t i;              /* V_INT */
    const unsigned char *s; /* V_STR: UTF-8 bytes in the input */
    size_t len;
} value;
typedef struct pair { size_t dict, key, val; } pair;

typedef struct machine {
    value *v;          /* every value made, in order */
    size_t nv, *stack, sp, *memo, nmemo, cap;
    bool *memo_set;
    pair *pairs;
    size_t np;
    char *err;
    size_t errn;
} machine;

static int fail(machine *m, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, m->errn, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t le(const unsigned char *p, int n) {
    uint64_t x = 0;
    for (int k = n - 1; k >= 0; k--) x = x << 8 | p[k];
    return x;
}

static int push(machine *m, value v) {
    if (m->nv >= m->cap || m->sp >= m->cap) return fail(m, "too many values");
    m->v[m->nv] = v;
    m->stack[m->sp++] = m->nv++;
    return 0;
}

/* Pops pairs down to the topmost mark (items) or two values (one item) into
 * the dict below them. */
static int set_items(machine *m, bool many, size_t at) {
    size_t first; /* stack index of the first key */
    if (many) {
        size_t mk = m->sp;
        while (mk > 0 && m->v[m->stack[mk - 1]].type != V_MARK) mk--;
        if (mk == 0) return fail(m, "SETITEMS without a MARK at byte %zu", at);
        first = mk; /* stack[mk - 1] is the mark */
        if ((m->sp - first) % 2) return fail(m, "SETITEMS with an odd count at byte %zu", at);
    } else {
        if (m->sp < 3) return fail(m, "SETITEM on a short stack at byte %zu", at);
        first = m->sp - 2;
    }
    size_t below = many ? first - 1 : first; /* the mark, or the key */
    if (below == 0) return fail(m, "no dict under SETITEM(S) at byte %zu", at);
    size_t d = m->stack[below - 1];
    if (m->v[d].type != V_DICT) return fail(m, "SETITEM(S) on a non-dict at byte %zu", at);
    for (size_t k = first; k + 1 < m->sp; k += 2) {
        size_t kk = m->stack[k], vv = m->stack[k + 1];
        if (m->v[kk].type == V_MARK || m->v[vv].type == V_MARK || m->np >= m->cap)
            return fail(m, "a MARK inside SETITEMS at byte %zu", at);
        m->pairs[m->np++] = (pair){d, kk, vv};
    }
    m->sp = below;
    return 0;
}

static int memo_put(machine *m, uint64_t idx, size_t at) {
    if (m->sp == 0) return fail(m, "PUT on an empty stack at byte %zu", at);
    if (idx >= m->cap) return fail(m, "memo index %llu too large at byte %zu", (unsigned long long)idx, at);
    m->memo[idx] = m->stack[m->sp - 1], m->memo_set[idx] = true;
    return 0;
}

static int memo_get(machine *m, uint64_t idx, size_t at) {
    if (idx >= m->cap || !m->memo_set[idx])
        return fail(m, "GET of memo %llu, never put, at byte %zu", (unsigned long long)idx, at);
    if (m->sp >= m->cap) return fail(m, "too many values");
    m->stack[m->sp++] = m->memo[idx];
    return 0;
}

/* Runs the opcodes; 0 with the result dict's value index in *top. */
static int run(machine *m, const unsigned char *b, size_t len, size_t *top) {
    size_t p = 0;
    static const int arg_len[256] = {[0x80] = 1, [0x95] = 8, ['q'] = 1, ['r'] = 4, ['h'] = 1,
                                     ['j'] = 4, ['K'] = 1, ['M'] = 2, ['J'] = 4, [0x8c] = 1,
                                     ['X'] = 4, [0x8d] = 8};
    while (p < len) {
        unsigned op = b[p];
        size_t at = p++, a = (size_t)arg_len[op];
        if ((at == 0) != (op == 0x80))
            return fail(m, at ? "PROTO at byte %zu, not first" : "no PROTO opcode first: pickle "
                        "protocol 0 or 1 (2 to 5 are read)", at);
        if (len - p < a) return fail(m, "truncated at byte %zu", at);
        uint64_t x = le(b + p, (int)a);
        p += a;
        int st = 0;
        switch (op) {
        case 0x80: if (x < 2 || x > 5) return fail(m, "pickle protocol %llu (2 to 5 are read)", (unsigned long long)x); break;
        case 0x95: if (x > len - p) return fail(m, "a FRAME past the end at byte %zu", at); break;
        case '}': st = push(m, (value){.type = V_DICT}); break;
        case '(': st = push(m, (value){.type = V_MARK}); break;
        case 0x94: st = memo_put(m, m->nmemo++, at); break;
        case 'q': case 'r': st = memo_put(m, x, at); break;
        case 'h': case 'j': st = memo_get(m, x, at); break;
        case 'K': case 'M': st = push(m, (value){.type = V_INT, .i = (int64_t)x}); break;
        case 'J': st = push(m, (value){.type = V_INT, .i = (int32_t)(uint32_t)x}); break;
        case 0x8c: case 'X': case 0x8d:
            if (x > len - p) return fail(m, "a string past the end at byte %zu", at);
            st = push(m, (value){.type = V_STR, .s = b + p, .len = (size_t)x});
            p += (size_t)x;
            break;
        case 's': case 'u': st = set_items(m, op == 'u', at); break;
        case '.':
            if (p != len) return fail(m, "%zu bytes after STOP", len - p);
            if (m->sp != 1 || m->v[m->stack[0]].type != V_DICT)
                return fail(m, "the pickle is not one dict");
            *top = m->stack[0];
            return 0;
        default:
            return fail(m, "opcode 0x%02x at byte %zu is not one that meta.pkl uses: refused "
                        "(a pickle is only read here, never executed)", op, at);
        }
        if (st) return st;
    }
    return fail(m, "no STOP: the file is truncated");
}

/* One code point from exactly the bytes s[0..n-1], or -1. */
static int64_t one_code_point(const unsigned char *s, size_t n) {
    if (n == 0) return -1;
    int k = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3
            : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (k == 0 || (size_t)k != n) return -1;
    uint32_t c = k == 1 ? s[0] : s[0] & (0x7f >> k);
    for (int i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80) return -1;
        c = c << 6 | (s[i] & 0x3f);
    }
    static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[k] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return -1;
    return c;
}

static bool str_is(const value *v, const char *s) {
    return v->type == V_STR && v->len == strlen(s) && !memcmp(v->s, s, v->len);
}

/* vocab_size, itos and stoi of the top dict, checked against each other. */
static int extract(machine *m, size_t top, gpt_meta_pkl *out) {
    size_t vs = 0, itos = 0, stoi = 0;
    for (size_t k = 0; k < m->np; k++) {
        if (m->pairs[k].dict != top) continue;
        const value *key = &m->v[m->pairs[k].key];
        size_t *slot = str_is(key, "vocab_size") ? &vs : str_is(key, "itos") ? &itos
                       : str_is(key, "stoi") ? &stoi : NULL;
        if (slot && *slot) return fail(m, "a key given twice");
        if (slot) *slot = m->pairs[k].val + 1;
    }
    if (!vs || !itos || !stoi) return fail(m, "not nanoGPT's meta.pkl: needs 'vocab_size', 'itos' and 'stoi'");
    const value *V = &m->v[vs - 1];
    if (V->type != V_INT || V->i < 1 || V->i > 65536)
        return fail(m, "'vocab_size' is not an int in 1..65536 (the .bin files hold uint16)");
    if (m->v[itos - 1].type != V_DICT || m->v[stoi - 1].type != V_DICT)
        return fail(m, "'itos' and 'stoi' must be dicts");
    int n = (int)V->i, seen_i = 0, seen_s = 0;
    uint32_t *cp = malloc((size_t)n * sizeof *cp);
    bool *have = calloc((size_t)n, 1);
    int st = cp && have ? 0 : fail(m, "out of memory");
    for (size_t k = 0; !st && k < m->np; k++) { /* itos: i -> one character */
        if (m->pairs[k].dict != itos - 1) continue;
        const value *key = &m->v[m->pairs[k].key], *val = &m->v[m->pairs[k].val];
        int64_t c = val->type == V_STR ? one_code_point(val->s, val->len) : -1;
        if (key->type != V_INT || key->i < 0 || key->i >= n || have[key->i] || c < 0)
            st = fail(m, "'itos' must map each of 0..%d once to one character", n - 1);
        else have[key->i] = true, cp[key->i] = (uint32_t)c, seen_i++;
    }
    for (int i = 1; !st && i < n; i++)
        if (cp[i] <= cp[i - 1]) st = fail(m, "'itos' is not in increasing code point order");
    for (size_t k = 0; !st && k < m->np; k++) { /* stoi: its inverse */
        if (m->pairs[k].dict != stoi - 1) continue;
        const value *key = &m->v[m->pairs[k].key], *val = &m->v[m->pairs[k].val];
        int64_t c = key->type == V_STR ? one_code_point(key->s, key->len) : -1;
        if (val->type != V_INT || val->i < 0 || val->i >= n || c < 0 || cp[val->i] != (uint32_t)c)
            st = fail(m, "'stoi' is not the inverse of 'itos'");
        seen_s++;
    }
    if (!st && (seen_i != n || seen_s != n))
        st = fail(m, "'itos' and 'stoi' must have vocab_size = %d entries", n);
    free(have);
    if (st) return free(cp), st;
    out->vocab_size = n, out->itos = cp;
    return 0;
}

int gpt_meta_pkl_read(const unsigned char *buf, size_t len, gpt_meta_pkl *out, char *err,
                      size_t n) {
    machine m = {.err = err, .errn = n, .cap = len + 1};
    out->vocab_size = 0, out->itos = NULL;
    if (len > MAX_FILE) return fail(&m, "over 16 MB: not a meta.pkl");
    m.v = malloc(m.cap * sizeof *m.v), m.stack = malloc(m.cap * sizeof *m.stack);
    m.memo = malloc(m.cap * sizeof *m.memo), m.memo_set = calloc(m.cap, 1);
    m.pairs = malloc(m.cap * sizeof *m.pairs);
    size_t top = 0;
    int st = m.v && m.stack && m.memo && m.memo_set && m.pairs ? 0 : fail(&m, "out of memory");
    if (!st) st = run(&m, buf, len, &top);
    if (!st) st = extract(&m, top, out);
    free(m.v), free(m.stack), free(m.memo), free(m.memo_set), free(m.pairs);
    return st;
}

void gpt_meta_pkl_free(gpt_meta_pkl *m) {
    free(m->itos);
    m->itos = NULL, m->vocab_size = 0;
}

/* ---- the writer: Python's Pickler(protocol=4) --------------------------------- */
typedef struct out {
    unsigned char *b;
    size_t n, cap, frame; /* frame: where the current frame's opcodes start */
    bool oom;
} out;

static void put(out *o, const void *p, size_t n) {
    if (o->n + n + 9 > o->cap) {
        size_t cap = 2 * (o->n + n + 9);
        unsigned char *b = realloc(o->b, cap);
        if (!b) { o->oom = true; return; }
        o->b = b, o->cap = cap;
    }
    memcpy(o->b + o->n, p, n);
    o->n += n;
}
static void put1(out *o, unsigned c) { unsigned char b = (unsigned char)c; put(o, &b, 1); }

/* Python's _Framer: before each object, a frame of >= 64 KiB is closed
 * (FRAME + its length go in front of it); at the end, the last one. */
static void commit(out *o, bool force) {
    size_t len = o->n - o->frame;
    if (o->oom || (!force && len < 65536)) return;
    if (len >= 4) {
        put(o, "\0\0\0\0\0\0\0\0\0", 9);
        if (o->oom) return;
        memmove(o->b + o->frame + 9, o->b + o->frame, len);
        o->b[o->frame] = 0x95;
        for (int k = 0; k < 8; k++) o->b[o->frame + 1 + k] = (unsigned char)((uint64_t)len >> 8 * k);
    }
    o->frame = o->n;
}

static void put_int(out *o, int v) {
    commit(o, false);
    if (v < 256) put1(o, 'K'), put1(o, (unsigned)v);
    else if (v < 65536) put1(o, 'M'), put1(o, v & 255), put1(o, (unsigned)v >> 8);
    else put1(o, 'J'), put(o, (unsigned char[]){v & 255, v >> 8 & 255, v >> 16 & 255, (unsigned)v >> 24}, 4);
}

static void put_str(out *o, const char *s, size_t n) {
    commit(o, false);
    if (n < 256) put1(o, 0x8c), put1(o, (unsigned)n);
    else put1(o, 'X'), put(o, (unsigned char[]){n & 255, n >> 8 & 255, n >> 16 & 255, n >> 24 & 255}, 4);
    put(o, s, n);
    put1(o, 0x94);
}

static size_t utf8(uint32_t c, char *s) {
    if (c < 0x80) return s[0] = (char)c, 1;
    if (c < 0x800) return s[0] = (char)(0xc0 | c >> 6), s[1] = (char)(0x80 | (c & 63)), 2;
    if (c < 0x10000)
        return s[0] = (char)(0xe0 | c >> 12), s[1] = (char)(0x80 | (c >> 6 & 63)),
               s[2] = (char)(0x80 | (c & 63)), 3;
    return s[0] = (char)(0xf0 | c >> 18), s[1] = (char)(0x80 | (c >> 12 & 63)),
           s[2] = (char)(0x80 | (c >> 6 & 63)), s[3] = (char)(0x80 | (c & 63)), 4;
}

/* One dict's items in batches of 1000, as _batch_setitems; key(i) and
 * val(i) write item i. memo0: the memo index of the first character. */
static void put_items(out *o, const uint32_t *chars, int n, bool itos, size_t memo0) {
    for (int start = 0; start < n; start += 1000) {
        int cnt = n - start < 1000 ? n - start : 1000;
        if (cnt > 1) put1(o, '(');
        for (int i = start; i < start + cnt; i++) {
            if (itos) {
                char s[4];
                put_int(o, i);
                put_str(o, s, utf8(chars[i], s));
            } else {
                size_t idx = memo0 + (size_t)i;
                commit(o, false);
                if (idx < 256) put1(o, 'h'), put1(o, (unsigned)idx);
                else put1(o, 'j'), put(o, (unsigned char[]){idx & 255, idx >> 8 & 255, idx >> 16 & 255, idx >> 24 & 255}, 4);
                put_int(o, i);
            }
        }
        put1(o, cnt > 1 ? 'u' : 's');
        if (cnt < 1000) break;
    }
}

unsigned char *gpt_meta_pkl_write(const uint32_t *chars, int n, size_t *len) {
    out o = {0};
    put1(&o, 0x80), put1(&o, 4);
    o.frame = o.n;
    commit(&o, false);
    put1(&o, '}'), put1(&o, 0x94);                     /* memo 0: meta */
    put1(&o, '(');
    put_str(&o, "vocab_size", 10), put_int(&o, n);      /* memo 1 */
    put_str(&o, "itos", 4);                             /* memo 2 */
    commit(&o, false);
    put1(&o, '}'), put1(&o, 0x94);                     /* memo 3; chars 4 .. 4+n-1 */
    put_items(&o, chars, n, true, 0);
    put_str(&o, "stoi", 4);
    commit(&o, false);
    put1(&o, '}'), put1(&o, 0x94);
    put_items(&o, chars, n, false, 4);
    put1(&o, 'u');
    put1(&o, '.');
    commit(&o, true);
    if (o.oom) return free(o.b), NULL;
    *len = o.n;
    return o.b;
}
