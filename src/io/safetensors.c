/* io/safetensors.c - the safetensors format facts that saving
 * (safetensors_save.c) and loading (safetensors_load.c) share: the dtype
 * table, byte order, the UTF-8 and duplicate-name checks, the error helper
 * nb_io_fail and the writer's failure-injection hook nb_io_fault. The layout
 * is described in nabla/io.h.
 *
 * Byte order: the format is little-endian. Elements are byte-swapped on the
 * way in and out when the host is big-endian (detected at run time by
 * nb_st_host_is_little_endian); F16/BF16 bytes are assembled explicitly and
 * need no swap. */
#include "io/io_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>

/* ---- dtypes ---------------------------------------------------------------- */
const nb_st_dtype nb_st_dtypes[NB_ST_DTYPE_COUNT] = {
    [NB_ST_F32] = {"F32", 4, NB_F32},   [NB_ST_F64] = {"F64", 8, NB_F64},
    [NB_ST_I64] = {"I64", 8, NB_I64},   [NB_ST_BOOL] = {"BOOL", 1, NB_BOOL},
    [NB_ST_F16] = {"F16", 2, NB_F32},   [NB_ST_BF16] = {"BF16", 2, NB_F32},
};
_Static_assert(NB_DTYPE_COUNT == 4, "a new nb_dtype needs its safetensors name in nb_st_dtypes");

int nb_st_dtype_find(const char *name) {
    for (int i = 0; i < NB_ST_DTYPE_COUNT; i++)
        if (strcmp(nb_st_dtypes[i].name, name) == 0) return i;
    return -1;
}

/* ---- bytes ------------------------------------------------------------------ */
bool nb_st_host_is_little_endian(void) {
    const union {
        uint16_t u;
        unsigned char b[2];
    } probe = {.u = 1};
    return probe.b[0] == 1;
}

void nb_st_swap_elements(unsigned char *p, size_t n, size_t width) {
    for (size_t i = 0; i + width <= n; i += width)
        for (size_t a = i, b = i + width - 1; a < b; a++, b--) {
            unsigned char c = p[a];
            p[a] = p[b];
            p[b] = c;
        }
}

size_t nb_st_utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0, len;
    uint32_t cp;
    while (i < n && (len = nb_utf8_next(s + i, n - i, &cp)) != 0) i += len;
    return i;
}

bool nb_st_utf8_valid(const char *s) {
    size_t n = strlen(s);
    return nb_st_utf8_invalid_at((const unsigned char *)s, n) == n;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int nb_st_find_duplicate(const char *const *s, size_t n, const char **dup) {
    if (n < 2) return 0;
    const char **sorted = malloc(n * sizeof *sorted);
    if (!sorted) return -1;
    memcpy(sorted, s, n * sizeof *sorted);
    qsort(sorted, n, sizeof *sorted, cmp_str);
    int found = 0;
    for (size_t i = 1; i < n && !found; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            *dup = sorted[i];
            found = 1;
        }
    free(sorted);
    return found;
}

/* ---- errors and failure injection ------------------------------------------ */
nb_status nb_io_fail(nb_ctx *ctx, nb_status s, const char *op, const char *path,
                     const char *fmt, ...) {
    char msg[NB_ERRMSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nb_ctx_fail(ctx, s, "%s: %s: %s", op, path ? path : "(NULL path)", msg);
}

long nb_io_fault_at, nb_io_fault_calls;

bool nb_io_fault(void) {
    if (++nb_io_fault_calls != nb_io_fault_at) return false;
    errno = EIO;
    return true;
}

/* ---- half-precision floats, widened as they load --------------------------------- */
/* IEEE half -> single, exactly: every half is representable as a float. */
static uint32_t f16_to_f32_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    if (exp == 0x1f) return sign | 0x7f800000u | mant << 13; /* inf, NaN (payload kept) */
    if (exp != 0) return sign | (exp + 112) << 23 | mant << 13; /* rebias 15 -> 127 */
    if (mant == 0) return sign;                                 /* +-0 */
    /* Subnormal, mant * 2^-24: shift the leading one up to bit 10 (the
     * implicit bit); each shift halves the exponent, from 2^-14 (113). */
    uint32_t e = 113;
    while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
    }
    return sign | e << 23 | (mant & 0x3ffu) << 13;
}

/* Widens `numel` little-endian F16 or BF16 values at the start of `data` to
 * floats in place. Goes from the last element down: float i covers halves
 * 2i and 2i+1, which are read by then. */
void nb_st_widen_to_f32(void *data, size_t numel, bool bf16) {
    const unsigned char *src = data;
    float *dst = data;
    for (size_t i = numel; i-- > 0;) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        uint32_t bits = bf16 ? (uint32_t)h << 16 : f16_to_f32_bits(h);
        memcpy(&dst[i], &bits, sizeof bits);
    }
}
