/* io/safetensors.c - saving and loading named tensor lists as safetensors files
 * (the layout is described in nabla/io.h).
 *
 * Loading validates the whole header against the file's size before it
 * creates a tensor, so a bad file leaves `out` as it was; then the data is
 * read straight into the new tensors, in file order, so a checkpoint is never
 * held in memory twice. cJSON parses the header; the checks it does not do
 * (UTF-8, duplicate keys, exact integers) are done here.
 *
 * Saving writes the header by hand: offsets are 64-bit integers, which cJSON
 * would print as doubles. The file goes to "<path>.tmp.<pid>", is flushed and
 * fsync'ed, and is renamed over `path` only when everything succeeded.
 *
 * Byte order: the format is little-endian. Elements are byte-swapped on the
 * way in and out when the host is big-endian (detected at run time by
 * host_is_little_endian); F16/BF16 bytes are assembled explicitly and need no
 * swap. */
#include "io/io_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define ST_MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers may be rounded */
#define ST_META_KEY "__metadata__"

/* ---- dtypes ---------------------------------------------------------------- */
typedef struct st_dtype {
    const char *name; /* as written in the header */
    size_t size;      /* bytes per element in the file */
    nb_dtype loads_as;
} st_dtype;

/* Every nb_dtype is its own file dtype (indexed by its value when saving);
 * F16 and BF16 only load, as F32. */
enum {
    ST_F32 = NB_F32,
    ST_F64 = NB_F64,
    ST_I64 = NB_I64,
    ST_BOOL = NB_BOOL,
    ST_F16 = NB_DTYPE_COUNT,
    ST_BF16,
    ST_DTYPE_COUNT
};
static const st_dtype st_dtypes[ST_DTYPE_COUNT] = {
    [ST_F32] = {"F32", 4, NB_F32},   [ST_F64] = {"F64", 8, NB_F64},
    [ST_I64] = {"I64", 8, NB_I64},   [ST_BOOL] = {"BOOL", 1, NB_BOOL},
    [ST_F16] = {"F16", 2, NB_F32},   [ST_BF16] = {"BF16", 2, NB_F32},
};
_Static_assert(NB_DTYPE_COUNT == 4, "a new nb_dtype needs its safetensors name in st_dtypes");

static int st_dtype_find(const char *name) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(st_dtypes[i].name, name) == 0) return i;
    return -1;
}

/* ---- bytes ------------------------------------------------------------------ */
static bool host_is_little_endian(void) {
    const union {
        uint16_t u;
        unsigned char b[2];
    } probe = {.u = 1};
    return probe.b[0] == 1;
}

/* Reverses the bytes of each `width`-byte element of p[0..n). */
static void swap_elements(unsigned char *p, size_t n, size_t width) {
    for (size_t i = 0; i + width <= n; i += width)
        for (size_t a = i, b = i + width - 1; a < b; a++, b--) {
            unsigned char c = p[a];
            p[a] = p[b];
            p[b] = c;
        }
}

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
static void widen_to_f32(void *data, size_t numel, bool bf16) {
    const unsigned char *src = data;
    float *dst = data;
    for (size_t i = numel; i-- > 0;) {
        uint16_t h = (uint16_t)(src[2 * i] | src[2 * i + 1] << 8);
        uint32_t bits = bf16 ? (uint32_t)h << 16 : f16_to_f32_bits(h);
        memcpy(&dst[i], &bits, sizeof bits);
    }
}

/* Where s[0..n) stops being UTF-8 (overlong forms, surrogates and code
 * points past U+10FFFF count as invalid), or n when it is all valid. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0, len;
    uint32_t cp;
    while (i < n && (len = nb_utf8_next(s + i, n - i, &cp)) != 0) i += len;
    return i;
}

static bool utf8_valid(const char *s) {
    size_t n = strlen(s);
    return utf8_invalid_at((const unsigned char *)s, n) == n;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Looks for a string that occurs twice in s[0..n) (sorting a copy, so large
 * metadata stays O(n log n)). 1 with *dup set, 0 when all differ, -1 when out
 * of memory. */
static int find_duplicate(const char *const *s, size_t n, const char **dup) {
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

/* find_duplicate over a list's names (all non-NULL). */
static int list_duplicate(const nb_tensor_list *l, const char **dup) {
    if (l->n <= NB_LIST_MAX) return find_duplicate(l->names, (size_t)l->n, dup);
    const char **names = malloc((size_t)l->n * sizeof *names);
    if (!names) return -1;
    for (int i = 0; i < l->n; i++) names[i] = nb_list_name(l, i);
    int found = find_duplicate(names, (size_t)l->n, dup);
    free(names);
    return found;
}

/* Shared with checkpoint.c (io_internal.h). */
nb_status nb_io_fail(nb_ctx *ctx, nb_status s, const char *op, const char *path,
                     const char *fmt, ...) {
    char msg[NB_ERRMSG];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return nb_ctx_fail(ctx, s, "%s: %s: %s", op, path ? path : "(NULL path)", msg);
}

/* ---- saving ------------------------------------------------------------------ */
#define SAVE "save_safetensors"

long nb_io_fault_at, nb_io_fault_calls;

bool nb_io_fault(void) {
    if (++nb_io_fault_calls != nb_io_fault_at) return false;
    errno = EIO;
    return true;
}

/* The writer's system calls, each behind the failure-injection hook. */
static bool io_write(FILE *f, const void *p, size_t n) {
    return !nb_io_fault() && fwrite(p, 1, n, f) == n;
}
static bool io_flush_sync(FILE *f) {
    return !nb_io_fault() && fflush(f) == 0 && !nb_io_fault() && fsync(fileno(f)) == 0;
}
static bool io_close(FILE *f) {
    if (nb_io_fault()) {
        fclose(f);
        errno = EIO;
        return false;
    }
    return fclose(f) == 0;
}
static bool io_rename(const char *from, const char *to) {
    return !nb_io_fault() && rename(from, to) == 0;
}

/* A growing byte buffer for the header; `oom` makes later appends no-ops. */
typedef struct st_buf {
    char *p;
    size_t len, cap;
    bool oom;
} st_buf;

static void buf_add(st_buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

static void buf_str(st_buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static void buf_u64(st_buf *b, uint64_t v) {
    char tmp[24];
    buf_add(b, tmp, (size_t)snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v));
}

/* s as a JSON string literal. s is valid UTF-8 (checked by the caller), so
 * only quotes, backslashes and control bytes need escapes. */
static void buf_json_string(st_buf *b, const char *s) {
    buf_add(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\', esc[1] = (char)*p;
            buf_add(b, esc, 2);
        } else if (*p < 0x20) {
            buf_add(b, esc, (size_t)snprintf(esc, sizeof esc, "\\u%04x", *p));
        } else {
            buf_add(b, (const char *)p, 1);
        }
    }
    buf_add(b, "\"", 1);
}

/* Checks everything about the arguments that can be checked before a file
 * is touched. */
static nb_status save_check_args(nb_ctx *ctx, const char *path, const nb_tensor_list *list,
                                 int n_meta, const char *const *keys,
                                 const char *const *values) {
    if (!path) return nb_ctx_fail(ctx, NB_ERR_NULL, SAVE ": path is NULL");
    if (!list) return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "list is NULL");
    if (!nb_list_valid(list))
        return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "list is corrupt (n = %d)", list->n);
    for (int i = 0; i < list->n; i++) {
        const char *name = nb_list_name(list, i);
        const nb_tensor *t = nb_list_tensor(list, i);
        if (!name) return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "entry %d has a NULL name", i);
        if (!t) return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "tensor '%s' is NULL", name);
        if (!name[0])
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "entry %d has an empty name", i);
        if (strcmp(name, ST_META_KEY) == 0)
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path,
                              "tensor name '" ST_META_KEY "' is reserved for metadata");
        if (!utf8_valid(name))
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "entry %d: name is not valid UTF-8",
                              i);
        if (t->dtype < 0 || t->dtype >= NB_DTYPE_COUNT)
            return nb_io_fail(ctx, NB_ERR_DTYPE, SAVE, path, "tensor '%s' has unknown dtype %d",
                              name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > NB_MAX_DIMS)
            return nb_io_fail(ctx, NB_ERR_SIZE, SAVE, path,
                              "tensor '%s' has %d dims, expected 0..%d", name, t->ndim,
                              NB_MAX_DIMS);
        if (!t->data)
            return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "tensor '%s' has no data", name);
    }
    const char *dup = NULL;
    int found = list_duplicate(list, &dup);
    if (found < 0) return nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory");
    if (found) return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "duplicate tensor name '%s'", dup);

    if (n_meta < 0)
        return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "n_meta is %d, expected >= 0", n_meta);
    if (n_meta > 0 && (!keys || !values))
        return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "%d metadata pairs but %s is NULL", n_meta,
                          keys ? "meta_values" : "meta_keys");
    for (int i = 0; i < n_meta; i++) {
        if (!keys[i] || !values[i])
            return nb_io_fail(ctx, NB_ERR_NULL, SAVE, path, "metadata %s %d is NULL",
                              keys[i] ? "value" : "key", i);
        if (!utf8_valid(keys[i]) || !utf8_valid(values[i]))
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "metadata pair %d is not valid UTF-8",
                              i);
    }
    found = find_duplicate(keys, (size_t)n_meta, &dup);
    if (found < 0) return nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory");
    if (found) return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "duplicate metadata key '%s'", dup);
    return NB_OK;
}

/* The JSON header, padded with spaces so the data starts 8-byte aligned. */
static void build_header(st_buf *b, const nb_tensor_list *list, int n_meta,
                         const char *const *keys, const char *const *values) {
    buf_str(b, "{");
    if (n_meta > 0) {
        buf_str(b, "\"" ST_META_KEY "\":{");
        for (int i = 0; i < n_meta; i++) {
            if (i) buf_str(b, ",");
            buf_json_string(b, keys[i]);
            buf_str(b, ":");
            buf_json_string(b, values[i]);
        }
        buf_str(b, list->n ? "}," : "}");
    }
    uint64_t offset = 0;
    for (int i = 0; i < list->n; i++) {
        const nb_tensor *t = nb_list_tensor(list, i);
        uint64_t bytes = (uint64_t)t->numel * nb_dtype_size(t->dtype);
        if (i) buf_str(b, ",");
        buf_json_string(b, nb_list_name(list, i));
        buf_str(b, ":{\"dtype\":\"");
        buf_str(b, st_dtypes[t->dtype].name);
        buf_str(b, "\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) {
            if (d) buf_str(b, ",");
            buf_u64(b, (uint64_t)t->shape[d]);
        }
        buf_str(b, "],\"data_offsets\":[");
        buf_u64(b, offset);
        buf_str(b, ",");
        buf_u64(b, offset + bytes);
        buf_str(b, "]}");
        offset += bytes;
    }
    buf_str(b, "}");
    while ((8 + b->len) % 8) buf_str(b, " ");
}

/* Writes t's elements little-endian (BOOL as 0/1 bytes). */
static bool write_tensor(FILE *f, const nb_tensor *t) {
    size_t width = nb_dtype_size(t->dtype), bytes = t->numel * width;
    if (host_is_little_endian() && t->dtype != NB_BOOL) return io_write(f, t->data, bytes);
    unsigned char chunk[4096]; /* a multiple of every element width */
    const unsigned char *src = t->data;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < sizeof chunk ? bytes - done : sizeof chunk;
        memcpy(chunk, src + done, n);
        if (t->dtype == NB_BOOL)
            for (size_t i = 0; i < n; i++) chunk[i] = chunk[i] != 0;
        else
            swap_elements(chunk, n, width);
        if (!io_write(f, chunk, n)) return false;
        done += n;
    }
    return true;
}

/* Makes the rename durable by syncing the directory that holds `path`. Best
 * effort: some file systems refuse fsync on directories, and the file is
 * complete and in place either way. */
static void sync_parent_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    size_t n = slash ? (size_t)(slash - path) : 0;
    char *dir = malloc(n + 2);
    if (!dir) return;
    if (!slash)
        strcpy(dir, ".");
    else if (n == 0)
        strcpy(dir, "/");
    else {
        memcpy(dir, path, n);
        dir[n] = '\0';
    }
    int fd = open(dir, O_RDONLY);
    free(dir);
    if (fd >= 0) {
        if (!nb_io_fault()) (void)fsync(fd);
        close(fd);
    }
}

nb_status nb_save_safetensors(nb_ctx *ctx, const char *path, const nb_tensor_list *list,
                              int n_meta, const char *const *meta_keys,
                              const char *const *meta_values) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    nb_status st = save_check_args(ctx, path, list, n_meta, meta_keys, meta_values);
    if (st) return st;

    st_buf hdr = {0};
    char *tmp = NULL;
    FILE *f = NULL;
    build_header(&hdr, list, n_meta, meta_keys, meta_values);
    if (hdr.oom) {
        st = nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory for the header");
        goto done;
    }
    if (hdr.len > NB_SAFETENSORS_MAX_HEADER) {
        st = nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path,
                        "header would be %zu bytes, over the %u-byte limit readers accept", hdr.len,
                        NB_SAFETENSORS_MAX_HEADER);
        goto done;
    }
    size_t tmp_size = strlen(path) + 32;
    tmp = malloc(tmp_size);
    if (!tmp) {
        st = nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory");
        goto done;
    }
    snprintf(tmp, tmp_size, "%s.tmp.%ld", path, (long)getpid());
    f = fopen(tmp, "wb");
    if (!f) {
        st = nb_io_fail(ctx, NB_ERR_IO, SAVE, path, "cannot create temporary file '%s': %s", tmp,
                        strerror(errno));
        goto done;
    }
    unsigned char size8[8];
    for (int k = 0; k < 8; k++) size8[k] = (unsigned char)((uint64_t)hdr.len >> (8 * k));
    bool ok = io_write(f, size8, 8) && io_write(f, hdr.p, hdr.len);
    for (int i = 0; ok && i < list->n; i++) ok = write_tensor(f, nb_list_tensor(list, i));
    ok = ok && io_flush_sync(f);
    if (ok) {
        ok = io_close(f);
        f = NULL;
    }
    if (!ok) {
        st = nb_io_fail(ctx, NB_ERR_IO, SAVE, path, "writing '%s' failed: %s", tmp,
                        strerror(errno));
        goto remove_tmp;
    }
    if (!io_rename(tmp, path)) {
        st = nb_io_fail(ctx, NB_ERR_IO, SAVE, path, "cannot rename '%s' over it: %s", tmp,
                        strerror(errno));
        goto remove_tmp;
    }
    sync_parent_dir(path);
    goto done;

remove_tmp:
    if (f) fclose(f);
    remove(tmp);
done:
    free(tmp);
    free(hdr.p);
    return st;
}

/* ---- loading ----------------------------------------------------------------- */
#define LOAD "load_safetensors"

typedef struct st_entry {
    const char *name; /* the JSON key, owned by the cJSON tree */
    int dt;           /* index into st_dtypes */
    int ndim;
    int64_t shape[NB_MAX_DIMS];
    uint64_t begin, end; /* [begin, end) in the data region */
} st_entry;

static int cmp_begin(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    return (x->begin > y->begin) - (x->begin < y->begin);
}

/* The value of a JSON number that is an exact integer in 0..2^53, or -1. */
static int64_t json_uint(const cJSON *j) {
    if (!cJSON_IsNumber(j)) return -1;
    double v = j->valuedouble;
    if (!(v >= 0 && v <= ST_MAX_EXACT_INT) || v != floor(v)) return -1;
    return (int64_t)v;
}

/* Reads one tensor entry of the header into e and checks it on its own
 * (the offsets against each other are checked by the caller). */
static nb_status parse_entry(nb_ctx *ctx, const char *path, const cJSON *item, uint64_t data_len,
                             st_entry *e) {
    const char *name = item->string;
    e->name = name;
    if (!name[0]) return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "a tensor has an empty name");
    if (!cJSON_IsObject(item))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "tensor '%s': entry is not a JSON object",
                          name);
    const char *fields[] = {"dtype", "shape", "data_offsets"};
    const cJSON *v[3];
    for (int k = 0; k < 3; k++)
        if (!(v[k] = cJSON_GetObjectItemCaseSensitive(item, fields[k])))
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "tensor '%s': missing \"%s\"", name,
                              fields[k]);

    if (!cJSON_IsString(v[0]))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "tensor '%s': \"dtype\" is not a string",
                          name);
    e->dt = st_dtype_find(v[0]->valuestring);
    if (e->dt < 0)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': unsupported dtype '%s' (nabla reads F32, F64, F16, BF16, "
                          "I64 and BOOL)",
                          name, v[0]->valuestring);

    if (!cJSON_IsArray(v[1]))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "tensor '%s': \"shape\" is not an array",
                          name);
    int ndim = cJSON_GetArraySize(v[1]);
    if (ndim > NB_MAX_DIMS)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': shape has %d dims, nabla tensors have at most %d", name,
                          ndim, NB_MAX_DIMS);
    e->ndim = ndim;
    uint64_t bytes = st_dtypes[e->dt].size;
    const cJSON *dim;
    int d = 0;
    cJSON_ArrayForEach(dim, v[1]) {
        int64_t n = json_uint(dim);
        if (n < 0)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "tensor '%s': shape[%d] is not an integer in 0..2^53", name, d);
        if (n == 0)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "tensor '%s': shape[%d] is 0; nabla tensors cannot have zero-size "
                              "dims",
                              name, d);
        if ((uint64_t)n > UINT64_MAX / bytes)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "tensor '%s': byte size of the shape overflows 64 bits", name);
        bytes *= (uint64_t)n;
        e->shape[d++] = n;
    }

    int64_t off[2] = {-1, -1};
    if (cJSON_IsArray(v[2]) && cJSON_GetArraySize(v[2]) == 2) {
        off[0] = json_uint(cJSON_GetArrayItem(v[2], 0));
        off[1] = json_uint(cJSON_GetArrayItem(v[2], 1));
    }
    if (off[0] < 0 || off[1] < 0)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': \"data_offsets\" is not [begin, end] with integers in "
                          "0..2^53",
                          name);
    e->begin = (uint64_t)off[0];
    e->end = (uint64_t)off[1];
    if (e->begin > e->end)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': data_offsets [%llu, %llu] has begin > end", name,
                          (unsigned long long)e->begin, (unsigned long long)e->end);
    if (e->end - e->begin != bytes) {
        char sh[96];
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s shape %s "
                          "needs %llu",
                          name, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)(e->end - e->begin), st_dtypes[e->dt].name,
                          nb_dims_str(e->ndim, e->shape, "[]", sh, sizeof sh),
                          (unsigned long long)bytes);
    }
    if (e->end > data_len)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': data_offsets [%llu, %llu] run past the end of the %llu "
                          "data bytes (file truncated?)",
                          name, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)data_len);
    return NB_OK;
}

/* Checks "__metadata__": an object of string values with distinct keys. */
static nb_status check_metadata(nb_ctx *ctx, const char *path, const cJSON *meta) {
    if (!cJSON_IsObject(meta))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "\"" ST_META_KEY "\" is not an object");
    const cJSON *m;
    size_t n = 0;
    cJSON_ArrayForEach(m, meta) {
        if (!cJSON_IsString(m))
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "\"" ST_META_KEY "\" value of '%s' is not a string", m->string);
        n++;
    }
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    n = 0;
    cJSON_ArrayForEach(m, meta) keys[n++] = m->string;
    const char *dup = NULL;
    int found = find_duplicate(keys, n, &dup);
    nb_status st = NB_OK;
    if (found < 0) st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    if (found > 0)
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "duplicate key '%s' in \"" ST_META_KEY "\"",
                        dup);
    free(keys);
    return st;
}

/* Checks the tensors tile the data region: sorted by begin, each starts where
 * the previous one ended, the first at 0, the last at the end of the file. */
static nb_status check_tiling(nb_ctx *ctx, const char *path, const st_entry *e, int n,
                              uint64_t data_len) {
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].begin < pos)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "tensors '%s' [%llu, %llu) and '%s' [%llu, %llu) overlap",
                              e[i - 1].name, (unsigned long long)e[i - 1].begin,
                              (unsigned long long)e[i - 1].end, e[i].name,
                              (unsigned long long)e[i].begin, (unsigned long long)e[i].end);
        if (e[i].begin > pos)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "gap in the data: bytes [%llu, %llu) before tensor '%s' belong to no "
                              "tensor",
                              (unsigned long long)pos, (unsigned long long)e[i].begin, e[i].name);
        pos = e[i].end;
    }
    if (pos != data_len)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "%llu trailing bytes: the data region is %llu bytes but the tensors end "
                          "at %llu",
                          (unsigned long long)(data_len - pos), (unsigned long long)data_len,
                          (unsigned long long)pos);
    return NB_OK;
}

static char *arena_strdup(nb_ctx *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = nb_ctx_alloc(ctx, n);
    if (p) memcpy(p, s, n);
    return p;
}

/* Reads the data of the (validated, sorted) entries into new tensors. The
 * file position is at the start of the data region. */
static nb_status read_tensors(nb_ctx *ctx, const char *path, FILE *f, const st_entry *e, int n,
                              nb_tensor **ts) {
    bool little = host_is_little_endian();
    for (int i = 0; i < n; i++) {
        const st_dtype *fd = &st_dtypes[e[i].dt];
        nb_tensor *t = nb_empty(ctx, fd->loads_as, e[i].ndim, e[i].shape);
        char *name = t ? arena_strdup(ctx, e[i].name) : NULL;
        if (!name) return nb_ctx_status(ctx);
        t->name = name;
        size_t bytes = (size_t)(e[i].end - e[i].begin);
        if (fread(t->data, 1, bytes, f) != bytes) {
            if (ferror(f))
                return nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "reading tensor '%s' failed: %s",
                                  name, strerror(errno));
            return nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "the file shrank while reading '%s'",
                              name);
        }
        if (e[i].dt == ST_F16 || e[i].dt == ST_BF16) {
            widen_to_f32(t->data, t->numel, e[i].dt == ST_BF16);
        } else if (e[i].dt == ST_BOOL) {
            const unsigned char *b = t->data;
            for (size_t k = 0; k < t->numel; k++)
                if (b[k] > 1)
                    return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                                      "tensor '%s': BOOL element %zu is %u, expected 0 or 1", name,
                                      k, b[k]);
        } else if (!little) {
            swap_elements(t->data, bytes, fd->size);
        }
        ts[i] = t;
    }
    return NB_OK;
}

/* Opens path for reading if it is a regular file. The open does not block
 * (O_NONBLOCK: a FIFO with no writer would otherwise hang it) and the type
 * is checked on the descriptor, so FIFOs, devices such as /dev/zero and
 * directories are refused before anything is read. */
static FILE *open_regular(nb_ctx *ctx, const char *path, struct stat *sb, nb_status *st) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot open: %s", strerror(errno));
        return NULL;
    }
    if (fstat(fd, sb) != 0) {
        *st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot stat: %s", strerror(errno));
        close(fd);
        return NULL;
    }
    if (!S_ISREG(sb->st_mode)) {
        *st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "not a regular file (%s)",
                         S_ISDIR(sb->st_mode)    ? "a directory"
                         : S_ISFIFO(sb->st_mode) ? "a FIFO"
                         : S_ISCHR(sb->st_mode)  ? "a character device"
                         : S_ISBLK(sb->st_mode)  ? "a block device"
                         : S_ISSOCK(sb->st_mode) ? "a socket"
                                                 : "not a file");
        close(fd);
        return NULL;
    }
    int flags = fcntl(fd, F_GETFL);
    FILE *f = flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0 ? NULL : fdopen(fd, "rb");
    if (!f) {
        *st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot open: %s", strerror(errno));
        close(fd);
    }
    return f;
}

nb_status nb_load_safetensors_meta(nb_ctx *ctx, const char *path, nb_tensor_list *out,
                                   int max_meta, int *n_meta, const char **keys,
                                   const char **values) {
    if (n_meta) *n_meta = 0;
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    if (!path) return nb_ctx_fail(ctx, NB_ERR_NULL, LOAD ": path is NULL");
    if (!out) return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "out is NULL");
    if (!nb_list_valid(out))
        return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path, "out is corrupt (n = %d)", out->n);
    if (max_meta < 0)
        return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path, "max_meta is %d, expected >= 0", max_meta);
    if (max_meta > 0 && (!keys || !values))
        return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "max_meta is %d but %s is NULL", max_meta,
                          keys ? "values" : "keys");

    nb_status st = NB_OK;
    char *hdr = NULL;
    cJSON *root = NULL;
    st_entry *entries = NULL;
    const char **names = NULL;
    nb_tensor **ts = NULL;
    struct stat sb;
    FILE *f = open_regular(ctx, path, &sb, &st);
    if (!f) return st;
    uint64_t file_len = (uint64_t)sb.st_size;
    if (file_len < 8) {
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "the file is %llu bytes, too short for the 8-byte header size",
                        (unsigned long long)file_len);
        goto done;
    }
    unsigned char size8[8];
    if (fread(size8, 1, 8, f) != 8) {
        st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot read the header size: %s",
                        ferror(f) ? strerror(errno) : "unexpected end of file");
        goto done;
    }
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | size8[k];
    if (hlen > NB_SAFETENSORS_MAX_HEADER) {
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "header size %llu exceeds the %u-byte limit (corrupt size field?)",
                        (unsigned long long)hlen, NB_SAFETENSORS_MAX_HEADER);
        goto done;
    }
    if (hlen > file_len - 8) {
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "header size %llu runs past the end of the file (%llu bytes)",
                        (unsigned long long)hlen, (unsigned long long)file_len);
        goto done;
    }
    uint64_t data_len = file_len - 8 - hlen;

    hdr = malloc((size_t)hlen + 1);
    if (!hdr) {
        st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory for a %llu-byte header",
                        (unsigned long long)hlen);
        goto done;
    }
    if (fread(hdr, 1, (size_t)hlen, f) != hlen) {
        st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot read the header: %s",
                        ferror(f) ? strerror(errno) : "unexpected end of file");
        goto done;
    }
    hdr[hlen] = '\0';
    size_t bad = utf8_invalid_at((const unsigned char *)hdr, (size_t)hlen);
    if (bad != hlen) {
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "header is not valid UTF-8 (byte 0x%02x at header offset %zu)",
                        (unsigned char)hdr[bad], bad);
        goto done;
    }
    if (hlen == 0 || hdr[0] != '{') {
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "header is not a JSON object (it must start with '{')");
        goto done;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end, false);
    if (!root) {
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "header is not valid JSON (error near header offset %td)",
                        end ? end - hdr : (ptrdiff_t)0);
        goto done;
    }
    /* cJSON stops after the first value; only padding may follow it. */
    for (const char *p = end; p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                            "header has data after its JSON object (header offset %td)", p - hdr);
            goto done;
        }

    /* Names: distinct (cJSON keeps every duplicate), and the count fits. */
    size_t n_keys = 0;
    const cJSON *item, *meta = NULL;
    cJSON_ArrayForEach(item, root) n_keys++;
    names = malloc((n_keys ? n_keys : 1) * sizeof *names);
    if (!names) {
        st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
        goto done;
    }
    n_keys = 0;
    cJSON_ArrayForEach(item, root) names[n_keys++] = item->string;
    const char *dup = NULL;
    int found = find_duplicate(names, n_keys, &dup);
    if (found) {
        st = found < 0 ? nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory")
                       : nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "duplicate name '%s' in header",
                                    dup);
        goto done;
    }
    cJSON_ArrayForEach(item, root) if (strcmp(item->string, ST_META_KEY) == 0) meta = item;
    size_t n_tensors = n_keys - (meta != NULL);
    if (n_tensors > (size_t)(INT_MAX - out->n)) {
        st = nb_io_fail(ctx, NB_ERR_SIZE, LOAD, path,
                        "the file has %zu tensors but the list has room for %d", n_tensors,
                        INT_MAX - out->n);
        goto done;
    }
    if (meta && (st = check_metadata(ctx, path, meta))) goto done;

    /* Each entry on its own, then all of them together. */
    entries = calloc(n_tensors ? n_tensors : 1, sizeof *entries);
    ts = calloc(n_tensors ? n_tensors : 1, sizeof *ts);
    if (!entries || !ts) {
        st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
        goto done;
    }
    int n = 0;
    cJSON_ArrayForEach(item, root) {
        if (item == meta) continue;
        if ((st = parse_entry(ctx, path, item, data_len, &entries[n++]))) goto done;
    }
    qsort(entries, (size_t)n, sizeof *entries, cmp_begin);
    if ((st = check_tiling(ctx, path, entries, n, data_len))) goto done;
    for (int i = 0; i < n; i++)
        if (nb_list_get(out, entries[i].name)) {
            st = nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path, "tensor '%s' is already in the list",
                            entries[i].name);
            goto done;
        }

    /* Valid: create the tensors, then the metadata copies, then append. */
    if ((st = read_tensors(ctx, path, f, entries, n, ts))) goto done;
    int n_file = 0;
    if (meta) {
        const cJSON *m;
        cJSON_ArrayForEach(m, meta) {
            if (n_file < max_meta) {
                keys[n_file] = arena_strdup(ctx, m->string);
                values[n_file] = arena_strdup(ctx, m->valuestring);
                if (!keys[n_file] || !values[n_file]) {
                    st = nb_ctx_status(ctx);
                    goto done;
                }
            }
            n_file++;
        }
    }
    const int n0 = out->n;
    for (int i = 0; i < n && !st; i++)
        if (nb_list_append(out, ts[i]->name, ts[i])) {
            out->n = n0;
            st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory for the list");
        }
    if (n_meta && !st) *n_meta = n_file;

done:
    free(ts);
    free(entries);
    free(names);
    cJSON_Delete(root);
    free(hdr);
    fclose(f);
    return st;
}

nb_status nb_load_safetensors(nb_ctx *ctx, const char *path, nb_tensor_list *out) {
    return nb_load_safetensors_meta(ctx, path, out, 0, NULL, NULL, NULL);
}
