/* core/context.c - the context: an arena that owns a step's tensors, the sticky
 * error, and the switches (grad mode, creation site). */
#define _DEFAULT_SOURCE 1 /* madvise's MADV_HUGEPAGE (Linux) */
#include "core/core_internal.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#if NB_HUGE_PAGES
#include <sys/mman.h>
#endif

#define NB_ALIGN 64
#define NB_DEFAULT_RESERVE (1u << 20)

/* Under AddressSanitizer the arena's free space is poisoned, and every
 * allocation is followed by a poisoned redzone of at least NB_ALIGN bytes,
 * so an op that reads or writes past its tensor is reported like a heap
 * overflow. Memory is unpoisoned when it is handed out and poisoned again
 * by reset. */
#if NB_ASAN
#include <sanitizer/asan_interface.h>
#define NB_REDZONE NB_ALIGN
#define POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define NB_REDZONE 0
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

static const char *const status_names[] = {
    "ok", "NULL argument", "shape error", "dtype error", "size error", "value error",
    "out of memory", "state error", "I/O error", "format error",
};
_Static_assert(sizeof(status_names) / sizeof(status_names[0]) == NB_STATUS_COUNT,
               "every nb_status needs a name");

const char *nb_status_str(nb_status s) {
    return (s >= 0 && s < NB_STATUS_COUNT) ? status_names[s] : "unknown status";
}

static unsigned char *chunk_base(nb_chunk *c) {
    uintptr_t p = (uintptr_t)(c + 1);
    return (unsigned char *)((p + NB_ALIGN - 1) & ~(uintptr_t)(NB_ALIGN - 1));
}

/* The chunk that replaces a step's chunks at reset (see nb_ctx_reset), when
 * it is HUGE_CHUNK bytes or more, starts on a 2 MB boundary and asks the
 * kernel for transparent huge pages (where it has them, in madvise mode
 * too): every later step's activations and gradients then need a few TLB
 * entries instead of one per 4 KB, which the gemm's strided reads of b
 * notice. The first step's growing chunks keep small pages, so the peak
 * memory is not theirs rounded up. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_CHUNK ((size_t)4 << 20)

static nb_chunk *chunk_new_as(nb_ctx *ctx, size_t size, bool huge) {
    if (size > SIZE_MAX - sizeof(nb_chunk) - NB_ALIGN - HUGE_PAGE) return NULL;
    nb_chunk *c;
    /* no object can be larger than PTRDIFF_MAX: a larger request is out of
     * memory here, before the sum below could wrap or malloc be asked for
     * what it cannot give */
    if (size > (size_t)PTRDIFF_MAX - sizeof(nb_chunk) - NB_ALIGN) return NULL;
    size_t bytes = sizeof(nb_chunk) + size + NB_ALIGN;
#if NB_HUGE_PAGES
    if (huge && size >= HUGE_CHUNK) {
        bytes = (bytes + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        c = aligned_alloc(HUGE_PAGE, bytes);
        if (c) madvise(c, bytes, MADV_HUGEPAGE); /* advice: failing is fine */
    } else
#else
    (void)huge; /* no huge pages off Linux (and in the WebAssembly build) */
#endif
        c = malloc(bytes);
    if (!c) return NULL;
    c->next = ctx->chunks;
    c->size = size;
    c->used = 0;
    POISON(chunk_base(c), size);
    ctx->chunks = c;
    ctx->reserved += size;
    ctx->mallocs++;
    return c;
}

static nb_chunk *chunk_new(nb_ctx *ctx, size_t size) { return chunk_new_as(ctx, size, false); }

static void chunk_free(nb_chunk *c) {
    UNPOISON(chunk_base(c), c->size);
    free(c);
}

static void chunks_free(nb_chunk *c) {
    while (c) {
        nb_chunk *next = c->next;
        chunk_free(c);
        c = next;
    }
}

nb_ctx *nb_ctx_new(size_t reserve) {
    nb_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) return NULL;
    ctx->grad_enabled = true;
    ctx->mallocs = 1;
    if (!chunk_new(ctx, reserve ? reserve : NB_DEFAULT_RESERVE)) {
        free(ctx);
        return NULL;
    }
    return ctx;
}

void nb_ctx_free(nb_ctx *ctx) {
    if (!ctx) return;
    chunks_free(ctx->quarantine);
    chunks_free(ctx->chunks);
    free(ctx);
}

/* The high half tags a live tensor, the low half is the generation. */
#define NB_STAMP_TAG 0x4e420000u
uint32_t nb_ctx_stamp(const nb_ctx *ctx) { return NB_STAMP_TAG | (ctx->generation & 0xffffu); }

bool nb_check_live(nb_ctx *ctx, const char *op, int n, const nb_tensor *const *in) {
#ifdef NB_DEBUG
    for (int i = 0; i < n; i++) {
        const nb_tensor *t = in[i];
        /* the tag first: a header overwritten by reset has no valid owner */
        if (!t || !t->owner) continue;
        if ((t->stamp & 0xffff0000u) == NB_STAMP_TAG && t->stamp == nb_ctx_stamp(t->owner))
            continue;
        nb_ctx_fail(ctx, NB_ERR_STATE, "%s: input %d was used after its context was reset "
                    "(a tensor from an earlier step?)", op, i + 1);
        return false;
    }
#else
    (void)ctx, (void)op, (void)n, (void)in;
#endif
    return true;
}

#ifdef NB_DEBUG
/* The last step's memory is overwritten and kept out of use for one more
 * step, so a tensor from before the reset reads a garbage stamp instead of
 * a new tensor's header at the same address. The step gets a fresh chunk
 * (not counted in nb_ctx_mallocs, so steady-state checks still hold). */
static void quarantine_chunks(nb_ctx *ctx) {
    chunks_free(ctx->quarantine);
    for (nb_chunk *c = ctx->chunks; c; c = c->next) memset(chunk_base(c), 0xdb, c->used);
    ctx->quarantine = ctx->chunks;
    ctx->chunks = NULL;
    ctx->reserved = 0;
    size_t want = ctx->peak + ctx->peak / 8;
    if (chunk_new(ctx, want > NB_DEFAULT_RESERVE ? want : NB_DEFAULT_RESERVE)) ctx->mallocs--;
}
#endif

void nb_ctx_reset(nb_ctx *ctx) {
    if (!ctx) return;
    ctx->generation++;
#ifdef NB_DEBUG
    quarantine_chunks(ctx);
#endif
    /* Several chunks mean the last step outgrew the arena: replace them by
     * one chunk that holds the peak, so the next steps need no malloc. */
    if (ctx->chunks && ctx->chunks->next) {
        size_t want = ctx->peak + ctx->peak / 8;
        chunks_free(ctx->chunks);
        ctx->chunks = NULL;
        ctx->reserved = 0;
        if (!chunk_new_as(ctx, want, true)) chunk_new(ctx, NB_DEFAULT_RESERVE);
    }
    for (nb_chunk *c = ctx->chunks; c; c = c->next) {
        POISON(chunk_base(c), c->used);
        c->used = 0;
    }
    ctx->used = 0;
    ctx->free_grads = NULL;
    ctx->tape = NULL;
    ctx->fwd_pending = NULL;
    ctx->tape_len = 0;
    ctx->scope_depth = 0;
    ctx->backward_done = false;
    ctx->status = NB_OK;
    ctx->errmsg[0] = '\0';
}

/* A handed-back buffer: the header lives in the buffer itself. */
struct nb_free_grad {
    struct nb_free_grad *next;
    size_t bytes;
};

void nb_ctx_give_back(nb_ctx *ctx, void *p, size_t bytes) {
    if (!ctx || !p || bytes < sizeof(struct nb_free_grad)) return;
    struct nb_free_grad *f = p;
    f->next = ctx->free_grads;
    f->bytes = bytes;
    ctx->free_grads = f;
}

void *nb_ctx_reuse(nb_ctx *ctx, size_t bytes) {
    if (!ctx) return NULL;
    for (struct nb_free_grad **p = &ctx->free_grads; *p; p = &(*p)->next)
        if ((*p)->bytes == bytes) {
            void *buf = *p;
            *p = (*p)->next;
            return buf;
        }
    return NULL;
}

void *nb_ctx_scratch(nb_ctx *ctx, size_t bytes) {
    void *p = nb_ctx_reuse(ctx, bytes);
    return p ? p : nb_ctx_alloc_raw(ctx, bytes);
}

void *nb_ctx_alloc(nb_ctx *ctx, size_t bytes) {
    void *p = nb_ctx_alloc_raw(ctx, bytes);
    if (p) memset(p, 0, bytes);
    return p;
}

void *nb_ctx_alloc_raw(nb_ctx *ctx, size_t bytes) {
    if (!ctx) return NULL;
    if (bytes == 0) bytes = 1;
    /* No allocator can return more than half the address space; asking
     * malloc would only fail later (and look like a negative size to it). */
    if (bytes > (size_t)PTRDIFF_MAX / 2 - NB_REDZONE) {
        nb_ctx_fail(ctx, NB_ERR_MEMORY, "alloc: %zu bytes is more than a process can allocate",
                    bytes);
        return NULL;
    }
    size_t need = (bytes + NB_REDZONE + NB_ALIGN - 1) & ~(size_t)(NB_ALIGN - 1);
    nb_chunk *c = ctx->chunks;
    if (!c || c->size - c->used < need) {
        size_t size = c ? c->size * 2 : NB_DEFAULT_RESERVE;
        if (size < need) size = need;
        c = chunk_new(ctx, size);
        if (!c) {
            nb_ctx_fail(ctx, NB_ERR_MEMORY, "alloc: out of memory for %zu bytes", bytes);
            return NULL;
        }
    }
    unsigned char *p = chunk_base(c) + c->used;
    UNPOISON(p, bytes);
    c->used += need;
    ctx->used += need;
    if (ctx->used > ctx->peak) ctx->peak = ctx->used;
    return p;
}

const char *nb_ctx_error(const nb_ctx *ctx) {
    if (!ctx) return "NULL context";
    return ctx->status == NB_OK ? NULL : ctx->errmsg;
}

nb_status nb_ctx_status(const nb_ctx *ctx) { return ctx ? ctx->status : NB_ERR_NULL; }

void nb_ctx_clear_error(nb_ctx *ctx) {
    if (!ctx) return;
    ctx->status = NB_OK;
    ctx->errmsg[0] = '\0';
}

nb_status nb_ctx_fail(nb_ctx *ctx, nb_status s, const char *fmt, ...) {
    if (!ctx || ctx->status != NB_OK) return s;
    ctx->status = s;
    if (!fmt) {
        snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s (no message: format was NULL)",
                 nb_status_str(s));
        return s;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx->errmsg, sizeof ctx->errmsg, fmt, ap);
    va_end(ap);
    if (!ctx->errmsg[0]) /* an error always says something */
        snprintf(ctx->errmsg, sizeof ctx->errmsg, "%s (no message)", nb_status_str(s));
    return s;
}

bool nb_ctx_ok(nb_ctx *ctx) { return ctx && ctx->status == NB_OK; }

bool nb_set_grad_enabled(nb_ctx *ctx, bool enabled) {
    if (!ctx) return false;
    bool prev = ctx->grad_enabled;
    ctx->grad_enabled = enabled;
    return prev;
}

bool nb_is_grad_enabled(const nb_ctx *ctx) { return ctx && ctx->grad_enabled; }

void nb_ctx_set_site(nb_ctx *ctx, const char *file, int line) {
    if (!ctx) return;
    ctx->site = (nb_site){file, line, false};
    ctx->user_site = ctx->site;
}

void nb_ctx_set_lib_site(nb_ctx *ctx, const char *file, int line) {
    if (ctx) ctx->site = (nb_site){file, line, true};
}

/* The push of both kinds: a user's scope (lib false) is also the user's
 * site from then on; a library's keeps the user's site it was reached from. */
static void push_scope(nb_ctx *ctx, const char *name, const char *file, int line, bool lib) {
    if (!ctx) return;
    int d = ctx->scope_depth++;
    if (d >= NB_SCOPE_MAX) {
        nb_ctx_fail(ctx, NB_ERR_VALUE, "push_scope: more than %d scopes deep at '%s'",
                    NB_SCOPE_MAX, name ? name : "");
        return;
    }
    const char *parent = d ? ctx->scopes[d - 1].path : "";
    const char *path = parent;
    if (name && *name) {
        size_t lp = strlen(parent), ln = strlen(name);
        char *p = nb_ctx_alloc(ctx, lp + ln + 2);
        if (p) {
            if (lp) memcpy(p, parent, lp), p[lp++] = '.';
            memcpy(p + lp, name, ln + 1);
            path = p;
        }
    }
    ctx->scopes[d] = (struct nb_scope){path, ctx->site, ctx->user_site};
    ctx->site = (nb_site){file, line, lib};
    if (!lib) ctx->user_site = ctx->site;
}

void nb_ctx_push_scope(nb_ctx *ctx, const char *name, const char *file, int line) {
    push_scope(ctx, name, file, line, false);
}

void nb_ctx_push_lib_scope(nb_ctx *ctx, const char *name, const char *file, int line) {
    push_scope(ctx, name, file, line, true);
}

void nb_ctx_pop_scope(nb_ctx *ctx) {
    if (!ctx || ctx->scope_depth <= 0) return;
    int d = --ctx->scope_depth;
    if (d >= NB_SCOPE_MAX) return;
    ctx->site = ctx->scopes[d].site;
    ctx->user_site = ctx->scopes[d].user_site;
}

const char *nb_ctx_scope(const nb_ctx *ctx) {
    if (!ctx || ctx->scope_depth <= 0) return "";
    int top = ctx->scope_depth < NB_SCOPE_MAX ? ctx->scope_depth : NB_SCOPE_MAX;
    return ctx->scopes[top - 1].path;
}

size_t nb_ctx_mem_used(const nb_ctx *ctx) { return ctx ? ctx->used : 0; }
size_t nb_ctx_mem_reserved(const nb_ctx *ctx) { return ctx ? ctx->reserved : 0; }
size_t nb_ctx_mallocs(const nb_ctx *ctx) { return ctx ? ctx->mallocs : 0; }
