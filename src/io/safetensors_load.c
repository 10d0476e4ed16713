/* io/safetensors_load.c - reading a safetensors file into a named tensor
 * list (the layout is described in nabla/io.h; the format facts shared with
 * the writer are in safetensors.c).
 *
 * The whole header is validated against the file's size before a tensor is
 * created, so a bad file leaves `out` as it was; then the data is read
 * straight into the new tensors, in file order, so a checkpoint is never
 * held in memory twice. cJSON parses the header; the checks it does not do
 * (UTF-8, duplicate keys, exact integers) are done here. F16 and BF16 data
 * is widened to F32. */
#include "io/io_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOAD "load_safetensors"
#define ST_MAX_EXACT_INT 9007199254740992.0 /* 2^53: larger JSON numbers may be rounded */

typedef struct st_entry {
    const char *name; /* the JSON key, owned by the cJSON tree */
    int dt;           /* index into nb_st_dtypes */
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

/* Reads the shape of tensor `name` (the JSON array `shape`) into e and sets
 * *bytes to the size of its data in the file. */
static nb_status parse_shape(nb_ctx *ctx, const char *path, const char *name, const cJSON *shape,
                             st_entry *e, uint64_t *bytes) {
    if (!cJSON_IsArray(shape))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path, "tensor '%s': \"shape\" is not an array",
                          name);
    int ndim = cJSON_GetArraySize(shape);
    if (ndim > NB_MAX_DIMS)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': shape has %d dims, nabla tensors have at most %d", name,
                          ndim, NB_MAX_DIMS);
    e->ndim = ndim;
    *bytes = nb_st_dtypes[e->dt].size;
    const cJSON *dim;
    int d = 0;
    cJSON_ArrayForEach(dim, shape) {
        int64_t n = json_uint(dim);
        if (n < 0)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "tensor '%s': shape[%d] is not an integer in 0..2^53", name, d);
        if (*bytes && (uint64_t)n > UINT64_MAX / *bytes)
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "tensor '%s': byte size of the shape overflows 64 bits", name);
        *bytes *= (uint64_t)n;
        e->shape[d++] = n;
    }
    return NB_OK;
}

/* Reads the data offsets of tensor `name` (the JSON value `offsets`) into e
 * and checks they hold `bytes` bytes inside the data region. */
static nb_status parse_offsets(nb_ctx *ctx, const char *path, const char *name,
                               const cJSON *offsets, uint64_t bytes, uint64_t data_len,
                               st_entry *e) {
    int64_t off[2] = {-1, -1};
    if (cJSON_IsArray(offsets) && cJSON_GetArraySize(offsets) == 2) {
        off[0] = json_uint(cJSON_GetArrayItem(offsets, 0));
        off[1] = json_uint(cJSON_GetArrayItem(offsets, 1));
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
                          (unsigned long long)(e->end - e->begin), nb_st_dtypes[e->dt].name,
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
    e->dt = nb_st_dtype_find(v[0]->valuestring);
    if (e->dt < 0)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "tensor '%s': unsupported dtype '%s' (nabla reads F32, F64, F16, BF16, "
                          "I64 and BOOL)",
                          name, v[0]->valuestring);
    uint64_t bytes = 0;
    nb_status st = parse_shape(ctx, path, name, v[1], e, &bytes);
    return st ? st : parse_offsets(ctx, path, name, v[2], bytes, data_len, e);
}

/* Checks "__metadata__": an object of string values with distinct keys. */
static nb_status check_metadata(nb_ctx *ctx, const char *path, const cJSON *meta) {
    if (!cJSON_IsObject(meta))
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "\"" NB_ST_META_KEY "\" is not an object");
    const cJSON *m;
    size_t n = 0;
    cJSON_ArrayForEach(m, meta) {
        if (!cJSON_IsString(m))
            return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                              "\"" NB_ST_META_KEY "\" value of '%s' is not a string", m->string);
        n++;
    }
    const char **keys = malloc((n ? n : 1) * sizeof *keys);
    if (!keys) return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    n = 0;
    cJSON_ArrayForEach(m, meta) keys[n++] = m->string;
    const char *dup = NULL;
    int found = nb_st_find_duplicate(keys, n, &dup);
    nb_status st = NB_OK;
    if (found < 0) st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    if (found > 0)
        st = nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                        "duplicate key '%s' in \"" NB_ST_META_KEY "\"", dup);
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

#define LAZY_MIN ((uint64_t)1 << 16)

/* Whether a lazy load leaves entry e in the file. */
static bool stays_in_file(const st_entry *e) {
    return e->end - e->begin >= LAZY_MIN && nb_st_host_is_little_endian() &&
           e->dt != NB_ST_F16 && e->dt != NB_ST_BF16 && e->dt != NB_ST_BOOL;
}

/* Reads the data of the (validated, sorted) entries into new tensors. The
 * file position is at the start of the data region (`data_at` in the file).
 * With lz, the entries stays_in_file picks get data NULL and a reference
 * in lz instead (lz->refs has room for n). */
static nb_status read_tensors(nb_ctx *ctx, const char *path, FILE *f, const st_entry *e, int n,
                              nb_tensor **ts, uint64_t data_at, nb_st_lazy *lz) {
    bool little = nb_st_host_is_little_endian();
    for (int i = 0; i < n; i++) {
        const nb_st_dtype *fd = &nb_st_dtypes[e[i].dt];
        if (lz && stays_in_file(&e[i])) {
            nb_tensor *t = nb_tensor_over(ctx, fd->loads_as, e[i].ndim, e[i].shape, NULL);
            char *name = t ? arena_strdup(ctx, e[i].name) : NULL;
            if (!name) return nb_ctx_status(ctx);
            t->name = name;
            lz->refs[lz->n++] = (nb_st_lazy_ref){t, data_at + e[i].begin, (size_t)(e[i].end - e[i].begin)};
            ts[i] = t;
            continue;
        }
        if (lz && fseeko(f, (off_t)(data_at + e[i].begin), SEEK_SET))
            return nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "seek failed: %s", strerror(errno));
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
        if (e[i].dt == NB_ST_F16 || e[i].dt == NB_ST_BF16) {
            nb_st_widen_to_f32(t->data, t->numel, e[i].dt == NB_ST_BF16);
        } else if (e[i].dt == NB_ST_BOOL) {
            const unsigned char *b = t->data;
            for (size_t k = 0; k < t->numel; k++)
                if (b[k] > 1)
                    return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                                      "tensor '%s': BOOL element %zu is %u, expected 0 or 1", name,
                                      k, b[k]);
        } else if (!little) {
            nb_st_swap_elements(t->data, bytes, fd->size);
        }
        ts[i] = t;
    }
    return NB_OK;
}

/* Opens path for reading if it is a regular file (nb_fopen_regular: FIFOs,
 * devices such as /dev/zero and directories are refused before anything is
 * read), with its stat in *sb. */
static FILE *open_regular(nb_ctx *ctx, const char *path, struct stat *sb, nb_status *st) {
    const char *why = NULL;
    FILE *f = nb_fopen_regular(path, &why);
    if (f && fstat(fileno(f), sb) != 0) {
        why = strerror(errno);
        fclose(f);
        f = NULL;
    }
    if (!f)
        *st = nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "%s%s",
                         strncmp(why, "not a regular file", 18) ? "cannot open: " : "", why);
    return f;
}

/* ---- nb_load_safetensors_meta, step by step ----------------------------------
 * The steps run in this order, each only when the ones before succeeded, so
 * a file is refused for the first thing wrong with it: the arguments; the
 * header's bytes; its JSON; its names; every entry, then all of them
 * together; and only then the tensors and the metadata copies are made. */

/* What a load holds while it runs (load_free releases it). */
typedef struct st_load {
    nb_ctx *ctx;
    const char *path;
    FILE *f;
    char *hdr;             /* the header, NUL-terminated */
    uint64_t hlen;         /* its length in the file */
    uint64_t data_len;     /* bytes after the header */
    cJSON *root;           /* the parsed header */
    const cJSON *meta;     /* its "__metadata__" object, or NULL */
    const char **names;    /* the header's keys (owned by root) */
    size_t n_tensors;
    st_entry *entries;     /* the tensor entries, sorted by begin */
    nb_tensor **ts;        /* the tensors made from them */
    int n;
} st_load;

static nb_status load_check_args(nb_ctx *ctx, const char *path, const nb_tensor_list *out,
                                 int max_meta, const char **keys, const char **values) {
    if (!path) return nb_ctx_fail(ctx, NB_ERR_NULL, LOAD ": path is NULL");
    if (!out) return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "out is NULL");
    if (!nb_list_valid(out))
        return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path, "out is corrupt (n = %d)", out->n);
    if (max_meta < 0)
        return nb_io_fail(ctx, NB_ERR_VALUE, LOAD, path, "max_meta is %d, expected >= 0", max_meta);
    if (max_meta > 0 && (!keys || !values))
        return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "max_meta is %d but %s is NULL", max_meta,
                          keys ? "values" : "keys");
    return NB_OK;
}

/* Reads the header size and the header (into L->hdr) from the start of a
 * file of file_len bytes, and checks it is UTF-8 that starts like a JSON
 * object. Sets L->hlen and L->data_len. */
static nb_status read_header(st_load *L, uint64_t file_len) {
    nb_ctx *ctx = L->ctx;
    const char *path = L->path;
    if (file_len < 8)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "the file is %llu bytes, too short for the 8-byte header size",
                          (unsigned long long)file_len);
    unsigned char size8[8];
    if (fread(size8, 1, 8, L->f) != 8)
        return nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot read the header size: %s",
                          ferror(L->f) ? strerror(errno) : "unexpected end of file");
    uint64_t hlen = 0;
    for (int k = 7; k >= 0; k--) hlen = hlen << 8 | size8[k];
    if (hlen > NB_SAFETENSORS_MAX_HEADER)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "header size %llu exceeds the %u-byte limit (corrupt size field?)",
                          (unsigned long long)hlen, NB_SAFETENSORS_MAX_HEADER);
    if (hlen > file_len - 8)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "header size %llu runs past the end of the file (%llu bytes)",
                          (unsigned long long)hlen, (unsigned long long)file_len);
    L->hlen = hlen;
    L->data_len = file_len - 8 - hlen;

    char *hdr = L->hdr = malloc((size_t)hlen + 1);
    if (!hdr)
        return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory for a %llu-byte header",
                          (unsigned long long)hlen);
    if (fread(hdr, 1, (size_t)hlen, L->f) != hlen)
        return nb_io_fail(ctx, NB_ERR_IO, LOAD, path, "cannot read the header: %s",
                          ferror(L->f) ? strerror(errno) : "unexpected end of file");
    hdr[hlen] = '\0';
    size_t bad = nb_st_utf8_invalid_at((const unsigned char *)hdr, (size_t)hlen);
    if (bad != hlen)
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "header is not valid UTF-8 (byte 0x%02x at header offset %zu)",
                          (unsigned char)hdr[bad], bad);
    if (hlen == 0 || hdr[0] != '{')
        return nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                          "header is not a JSON object (it must start with '{')");
    return NB_OK;
}

/* Parses the header into L->root: one JSON value, then only padding. */
static nb_status parse_header(st_load *L) {
    const char *hdr = L->hdr, *end = NULL;
    L->root = cJSON_ParseWithLengthOpts(hdr, (size_t)L->hlen, &end, false);
    if (!L->root)
        return nb_io_fail(L->ctx, NB_ERR_FORMAT, LOAD, L->path,
                          "header is not valid JSON (error near header offset %td)",
                          end ? end - hdr : (ptrdiff_t)0);
    /* cJSON stops after the first value; only padding may follow it. */
    for (const char *p = end; p < hdr + L->hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\r' && *p != '\n')
            return nb_io_fail(L->ctx, NB_ERR_FORMAT, LOAD, L->path,
                              "header has data after its JSON object (header offset %td)",
                              p - hdr);
    return NB_OK;
}

/* Checks the header's names are distinct (cJSON keeps every duplicate) and
 * the tensors fit in `out`, then the metadata. Sets L->meta and
 * L->n_tensors. */
static nb_status check_names(st_load *L, const nb_tensor_list *out) {
    nb_ctx *ctx = L->ctx;
    const char *path = L->path;
    size_t n_keys = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, L->root) n_keys++;
    L->names = malloc((n_keys ? n_keys : 1) * sizeof *L->names);
    if (!L->names) return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    n_keys = 0;
    cJSON_ArrayForEach(item, L->root) L->names[n_keys++] = item->string;
    const char *dup = NULL;
    int found = nb_st_find_duplicate(L->names, n_keys, &dup);
    if (found)
        return found < 0 ? nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory")
                         : nb_io_fail(ctx, NB_ERR_FORMAT, LOAD, path,
                                      "duplicate name '%s' in header", dup);
    cJSON_ArrayForEach(item, L->root) if (strcmp(item->string, NB_ST_META_KEY) == 0) L->meta = item;
    L->n_tensors = n_keys - (L->meta != NULL);
    if (L->n_tensors > (size_t)(INT_MAX - out->n))
        return nb_io_fail(ctx, NB_ERR_SIZE, LOAD, path,
                          "the file has %zu tensors but the list has room for %d", L->n_tensors,
                          INT_MAX - out->n);
    return L->meta ? check_metadata(ctx, path, L->meta) : NB_OK;
}

/* Reads every tensor entry on its own, then checks them together: they
 * tile the data region and none is in `out` already. */
static nb_status build_entries(st_load *L, const nb_tensor_list *out) {
    size_t slots = L->n_tensors ? L->n_tensors : 1;
    L->entries = calloc(slots, sizeof *L->entries);
    L->ts = calloc(slots, sizeof *L->ts);
    if (!L->entries || !L->ts)
        return nb_io_fail(L->ctx, NB_ERR_MEMORY, LOAD, L->path, "out of memory");
    const cJSON *item;
    nb_status st;
    cJSON_ArrayForEach(item, L->root) {
        if (item == L->meta) continue;
        if ((st = parse_entry(L->ctx, L->path, item, L->data_len, &L->entries[L->n++]))) return st;
    }
    qsort(L->entries, (size_t)L->n, sizeof *L->entries, cmp_begin);
    if ((st = check_tiling(L->ctx, L->path, L->entries, L->n, L->data_len))) return st;
    for (int i = 0; i < L->n; i++)
        if (nb_list_get(out, L->entries[i].name))
            return nb_io_fail(L->ctx, NB_ERR_VALUE, LOAD, L->path,
                              "tensor '%s' is already in the list", L->entries[i].name);
    return NB_OK;
}

/* The file is valid: creates the tensors, then the metadata copies (the
 * first max_meta pairs; *n_file counts them all), then appends the tensors
 * to `out` (all or none). */
static nb_status make_results(st_load *L, nb_tensor_list *out, int max_meta, const char **keys,
                              const char **values, int *n_file, nb_st_lazy *lz) {
    nb_ctx *ctx = L->ctx;
    nb_status st = read_tensors(ctx, L->path, L->f, L->entries, L->n, L->ts, 8 + L->hlen, lz);
    if (st) return st;
    *n_file = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, L->meta) { /* none when there is no metadata */
        if (*n_file < max_meta) {
            keys[*n_file] = arena_strdup(ctx, m->string);
            values[*n_file] = arena_strdup(ctx, m->valuestring);
            if (!keys[*n_file] || !values[*n_file]) return nb_ctx_status(ctx);
        }
        ++*n_file;
    }
    const int n0 = out->n;
    for (int i = 0; i < L->n; i++)
        if (nb_list_append(out, L->ts[i]->name, L->ts[i])) {
            out->n = n0;
            return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, L->path, "out of memory for the list");
        }
    return NB_OK;
}

static void load_free(st_load *L) {
    free(L->ts);
    free(L->entries);
    free(L->names);
    cJSON_Delete(L->root);
    free(L->hdr);
    if (L->f) fclose(L->f);
}

/* The load of both: lz NULL reads everything. */
static nb_status load_meta(nb_ctx *ctx, const char *path, nb_tensor_list *out, int max_meta,
                           int *n_meta, const char **keys, const char **values, nb_st_lazy *lz) {
    if (n_meta) *n_meta = 0;
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    nb_status st = load_check_args(ctx, path, out, max_meta, keys, values);
    if (st) return st;
    struct stat sb;
    st_load L = {.ctx = ctx, .path = path};
    L.f = open_regular(ctx, path, &sb, &st);
    if (!L.f) return st;
    int n_file = 0;
    st = read_header(&L, (uint64_t)sb.st_size);
    if (!st) st = parse_header(&L);
    if (!st) st = check_names(&L, out);
    if (!st) st = build_entries(&L, out);
    if (!st && lz && !(lz->refs = malloc(sizeof *lz->refs * (size_t)(L.n ? L.n : 1))))
        st = nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, path, "out of memory");
    if (!st) st = make_results(&L, out, max_meta, keys, values, &n_file, lz);
    if (n_meta && !st) *n_meta = n_file;
    if (!st && lz) lz->f = L.f, lz->path = path, L.f = NULL; /* kept open for the copies */
    load_free(&L);
    return st;
}

nb_status nb_load_safetensors_meta(nb_ctx *ctx, const char *path, nb_tensor_list *out,
                                   int max_meta, int *n_meta, const char **keys,
                                   const char **values) {
    return load_meta(ctx, path, out, max_meta, n_meta, keys, values, NULL);
}

nb_status nb_load_safetensors_lazy(nb_ctx *ctx, const char *path, nb_tensor_list *out,
                                   int max_meta, int *n_meta, const char **keys,
                                   const char **values, nb_st_lazy *lz) {
    *lz = (nb_st_lazy){0};
    nb_status st = load_meta(ctx, path, out, max_meta, n_meta, keys, values, lz);
    if (st) nb_st_lazy_free(lz);
    return st;
}

/* The caller stopped the load with st: its own error, or a generic one. */
static nb_status stopped(st_load *L, nb_status st) {
    if (!nb_ctx_status(L->ctx))
        nb_io_fail(L->ctx, st, LOAD, L->path, "stopped by the caller (status %d)", (int)st);
    return nb_ctx_status(L->ctx);
}

/* The header-only stand-ins, one call of `header`. */
static nb_status call_header(st_load *L, nb_status (*header)(void *, const nb_tensor_list *),
                             void *user) {
    nb_tensor *h = calloc((size_t)(L->n ? L->n : 1), sizeof *h);
    nb_tensor_list all = {0};
    nb_status st = h ? NB_OK : nb_io_fail(L->ctx, NB_ERR_MEMORY, LOAD, L->path, "out of memory");
    for (int i = 0; !st && i < L->n; i++) {
        const st_entry *e = &L->entries[i];
        h[i].dtype = nb_st_dtypes[e->dt].loads_as;
        h[i].ndim = e->ndim;
        h[i].numel = 1;
        for (int d = 0; d < NB_MAX_DIMS; d++) {
            h[i].shape[d] = d < e->ndim ? e->shape[d] : 1;
            h[i].numel *= (size_t)h[i].shape[d];
        }
        h[i].name = e->name;
        if (nb_list_append(&all, e->name, &h[i]))
            st = nb_io_fail(L->ctx, NB_ERR_MEMORY, LOAD, L->path, "out of memory for the list");
    }
    if (!st && (st = header(user, &all))) st = stopped(L, st);
    nb_list_free(&all);
    free(h);
    return st;
}

/* Each tensor in turn in a scratch context (the entries tile the data
 * region in order, so the reads follow each other). */
static nb_status call_each(st_load *L, nb_status (*each)(void *, const nb_tensor *), void *user) {
    nb_ctx *scratch = nb_ctx_new(0);
    if (!scratch) return nb_io_fail(L->ctx, NB_ERR_MEMORY, LOAD, L->path, "out of memory");
    nb_status st = NB_OK;
    for (int i = 0; !st && i < L->n; i++) {
        nb_ctx_reset(scratch);
        nb_tensor *t = NULL;
        if ((st = read_tensors(scratch, L->path, L->f, &L->entries[i], 1, &t, 0, NULL)))
            nb_ctx_fail(L->ctx, st, "%s", nb_ctx_error(scratch));
        else if ((st = each(user, t)))
            st = stopped(L, st);
    }
    nb_ctx_free(scratch);
    return st;
}

nb_status nb_load_safetensors_each(nb_ctx *ctx, const char *path,
                                   nb_status (*header)(void *user, const nb_tensor_list *all),
                                   nb_status (*each)(void *user, const nb_tensor *t),
                                   void *user) {
    if (!nb_ctx_ok(ctx)) return nb_ctx_status(ctx);
    nb_tensor_list none = {0};
    nb_status st = load_check_args(ctx, path, &none, 0, NULL, NULL);
    if (st) return st;
    if (!each) return nb_io_fail(ctx, NB_ERR_NULL, LOAD, path, "each is NULL");
    struct stat sb;
    st_load L = {.ctx = ctx, .path = path};
    L.f = open_regular(ctx, path, &sb, &st);
    if (!L.f) return st;
    st = read_header(&L, (uint64_t)sb.st_size);
    if (!st) st = parse_header(&L);
    if (!st) st = check_names(&L, &none);
    if (!st) st = build_entries(&L, &none);
    if (!st && header) st = call_header(&L, header, user);
    if (!st) st = call_each(&L, each, user);
    load_free(&L);
    return st;
}
