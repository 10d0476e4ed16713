/* io/safetensors_save.c - writing a named tensor list as a safetensors file
 * (the layout is described in nabla/io.h; the format facts shared with the
 * reader are in safetensors.c).
 *
 * The header is written by hand: offsets are 64-bit integers, which cJSON
 * would print as doubles. The file goes to "<path>.tmp.<pid>", is flushed and
 * fsync'ed, and is renamed over `path` only when everything succeeded. */
#include "io/io_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#define SAVE "save_safetensors"

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

/* nb_st_find_duplicate over a list's names (all non-NULL). */
static int list_duplicate(const nb_tensor_list *l, const char **dup) {
    if (l->n <= NB_LIST_MAX) return nb_st_find_duplicate(l->names, (size_t)l->n, dup);
    const char **names = malloc((size_t)l->n * sizeof *names);
    if (!names) return -1;
    for (int i = 0; i < l->n; i++) names[i] = nb_list_name(l, i);
    int found = nb_st_find_duplicate(names, (size_t)l->n, dup);
    free(names);
    return found;
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
        if (strcmp(name, NB_ST_META_KEY) == 0)
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path,
                              "tensor name '" NB_ST_META_KEY "' is reserved for metadata");
        if (!nb_st_utf8_valid(name))
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
        if (!nb_st_utf8_valid(keys[i]) || !nb_st_utf8_valid(values[i]))
            return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "metadata pair %d is not valid UTF-8",
                              i);
    }
    found = nb_st_find_duplicate(keys, (size_t)n_meta, &dup);
    if (found < 0) return nb_io_fail(ctx, NB_ERR_MEMORY, SAVE, path, "out of memory");
    if (found) return nb_io_fail(ctx, NB_ERR_VALUE, SAVE, path, "duplicate metadata key '%s'", dup);
    /* The rename would replace a device, a FIFO or a socket with the file
     * (/dev/full gone as root): only a regular file is overwritten (a
     * directory is left to the rename, which refuses it). */
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
        return nb_io_fail(ctx, NB_ERR_IO, SAVE, path, "exists and is not a regular file (%s)",
                          S_ISFIFO(sb.st_mode)  ? "a FIFO"
                          : S_ISCHR(sb.st_mode) ? "a character device"
                          : S_ISBLK(sb.st_mode) ? "a block device"
                                                : "a socket");
    return NB_OK;
}

/* The JSON header, padded with spaces so the data starts 8-byte aligned. */
static void build_header(st_buf *b, const nb_tensor_list *list, int n_meta,
                         const char *const *keys, const char *const *values) {
    buf_str(b, "{");
    if (n_meta > 0) {
        buf_str(b, "\"" NB_ST_META_KEY "\":{");
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
        buf_str(b, nb_st_dtypes[t->dtype].name);
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
    if (nb_st_host_is_little_endian() && t->dtype != NB_BOOL) return io_write(f, t->data, bytes);
    unsigned char chunk[4096]; /* a multiple of every element width */
    const unsigned char *src = t->data;
    for (size_t done = 0; done < bytes;) {
        size_t n = bytes - done < sizeof chunk ? bytes - done : sizeof chunk;
        memcpy(chunk, src + done, n);
        if (t->dtype == NB_BOOL)
            for (size_t i = 0; i < n; i++) chunk[i] = chunk[i] != 0;
        else
            nb_st_swap_elements(chunk, n, width);
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
