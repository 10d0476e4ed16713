/* io/io_internal.h - what the file readers and writers share. */
#ifndef NB_IO_INTERNAL_H
#define NB_IO_INTERNAL_H

#include "core/core_internal.h"

/* ---- safetensors format facts (safetensors.c), shared by the writer
 * (safetensors_save.c) and the reader (safetensors_load.c) ---------------- */
#define NB_ST_META_KEY "__metadata__" /* the header key that holds the metadata */

typedef struct nb_st_dtype {
    const char *name; /* as written in the header */
    size_t size;      /* bytes per element in the file */
    nb_dtype loads_as;
} nb_st_dtype;

/* Every nb_dtype is its own file dtype (indexed by its value when saving);
 * F16 and BF16 only load, as F32. */
enum {
    NB_ST_F32 = NB_F32,
    NB_ST_F64 = NB_F64,
    NB_ST_I64 = NB_I64,
    NB_ST_BOOL = NB_BOOL,
    NB_ST_F16 = NB_DTYPE_COUNT,
    NB_ST_BF16,
    NB_ST_DTYPE_COUNT
};
NB_HIDDEN extern const nb_st_dtype nb_st_dtypes[NB_ST_DTYPE_COUNT];

/* The index in nb_st_dtypes of the dtype called `name`, or -1. */
NB_HIDDEN int nb_st_dtype_find(const char *name);

NB_HIDDEN bool nb_st_host_is_little_endian(void);

/* Reverses the bytes of each `width`-byte element of p[0..n). */
NB_HIDDEN void nb_st_swap_elements(unsigned char *p, size_t n, size_t width);

/* Where s[0..n) stops being UTF-8 (overlong forms, surrogates and code
 * points past U+10FFFF count as invalid), or n when it is all valid. */
NB_HIDDEN size_t nb_st_utf8_invalid_at(const unsigned char *s, size_t n);

/* Whether the NUL-terminated s is all valid UTF-8. */
NB_HIDDEN bool nb_st_utf8_valid(const char *s);

/* Looks for a string that occurs twice in s[0..n) (sorting a copy, so large
 * metadata stays O(n log n)). 1 with *dup set, 0 when all differ, -1 when out
 * of memory. */
NB_HIDDEN int nb_st_find_duplicate(const char *const *s, size_t n, const char **dup);

/* ---- loading big files once (safetensors_load.c) ------------------------------
 * nb_load_safetensors_meta that leaves every tensor of LAZY_MIN bytes or more
 * (of a dtype stored as it loads, on a little-endian host) in the file: its
 * tensor has data NULL and its place in the file is recorded here, for
 * nb_st_lazy_copy to read straight into where it goes. A checkpoint load
 * then holds the model once, not the model and the file. The file is kept
 * open (the header was validated against its size) until nb_st_lazy_free. */
typedef struct nb_st_lazy_ref {
    const nb_tensor *t;
    uint64_t offset; /* in the file */
    size_t bytes;
} nb_st_lazy_ref;

typedef struct nb_st_lazy {
    FILE *f;
    const char *path;
    nb_st_lazy_ref *refs;
    int n;
} nb_st_lazy;

NB_HIDDEN nb_status nb_load_safetensors_lazy(nb_ctx *ctx, const char *path, nb_tensor_list *out,
                                             int max_meta, int *n_meta, const char **keys,
                                             const char **values, nb_st_lazy *lz);
/* dst (dtype dt, src's numel) = src: memmove, a conversion between F32 and
 * F64, or a read from the file for a lazy src. Errors (a read that fails
 * because the file changed since the load validated it) on ctx. */
NB_HIDDEN nb_status nb_st_lazy_copy(nb_ctx *ctx, const nb_st_lazy *lz, void *dst, nb_dtype dt,
                                    const nb_tensor *src);
NB_HIDDEN void nb_st_lazy_free(nb_st_lazy *lz);

/* numel little-endian F16 (or, bf16, BF16) values at the start of data
 * widened to floats in place (safetensors.c). */
NB_HIDDEN void nb_st_widen_to_f32(void *data, size_t numel, bool bf16);

/* ---- file errors (safetensors.c) -------------------------------------------- */
/* Records "<op>: <path>: <message>" on ctx (the message printf-formatted;
 * "(NULL path)" for a NULL path) and returns s. Used by safetensors and
 * checkpoint I/O. */
NB_HIDDEN nb_status nb_io_fail(nb_ctx *ctx, nb_status s, const char *op, const char *path,
                               const char *fmt, ...) NB_PRINTF_LIKE(5, 6);

/* Failure injection for the file writer (tests/check_io_faults.c): every
 * fwrite, fflush, fsync, fclose and rename a save makes, and the directory
 * fsync after it, first calls nb_io_fault(). It counts the calls in
 * nb_io_fault_calls and, when nb_io_fault_at is n > 0, makes the n-th one
 * fail with EIO (true = fail). Both are 0 outside tests; not thread-safe. */
NB_HIDDEN extern long nb_io_fault_at, nb_io_fault_calls;
NB_HIDDEN bool nb_io_fault(void);

#endif
