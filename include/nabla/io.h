/* nabla/io.h - safetensors checkpoints: named tensor lists to and from disk.
 *
 * safetensors is the format of Hugging Face's safetensors library, which
 * PyTorch models on the Hub are shipped in. A file is
 *
 *   8 bytes   N, the header size, an unsigned 64-bit little-endian integer
 *   N bytes   a UTF-8 JSON object:
 *               {"__metadata__": {"key": "value", ...},          (optional)
 *                "<name>": {"dtype": "F32", "shape": [2, 3],
 *                           "data_offsets": [begin, end]}, ...}
 *             padded with trailing spaces
 *   the data  every tensor's bytes, little-endian, row-major; offsets count
 *             from the first byte after the header
 *
 * Typical use, saving a model's parameters and loading them back:
 *
 *   nb_tensor_list params = {0};
 *   nb_list_add(&params, "fc.weight", w);
 *   nb_list_add(&params, "fc.bias", b);
 *   if (nb_save_safetensors(ctx, "model.safetensors", &params, 0, NULL, NULL))
 *       fprintf(stderr, "%s\n", nb_ctx_error(ctx));
 *
 *   nb_tensor_list loaded = {0};
 *   if (nb_load_safetensors(ctx, "model.safetensors", &loaded) == NB_OK)
 *       w2 = nb_list_get(&loaded, "fc.weight");
 *
 * Both functions return NB_OK or an error status; the error (with a message
 * naming the file and what is wrong) is also recorded on `ctx`. Like every
 * function taking a context, they do nothing and return the context's status
 * when the context already holds an error. */
#ifndef NABLA_IO_H
#define NABLA_IO_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Headers larger than this are refused, as the reference implementation
 * does: a corrupt size field must not make a reader allocate gigabytes. */
#define NB_SAFETENSORS_MAX_HEADER 100000000u

/* Writes every tensor of `list` (dtypes F32, F64, I64, BOOL; any shape) under
 * its name, in list order, plus `n_meta` string pairs as "__metadata__"
 * (meta_keys and meta_values may be NULL when n_meta is 0). The data start is
 * 8-byte aligned (the header is padded with spaces). `list` and its tensors
 * are only read; the tensors may belong to any context; `ctx` receives the
 * error.
 *
 * The write is atomic: the file is written to "<path>.tmp.<pid>" in the same
 * directory, flushed and fsync'ed, then renamed over `path`. On any failure
 * the temporary file is removed and a file already at `path` is left as it
 * was. Two threads of one process must not save to the same path at once.
 *
 * Returns NB_OK, or:
 *   NB_ERR_NULL   NULL ctx, path, list, name, tensor, tensor data or metadata
 *                 string;
 *   NB_ERR_VALUE  an empty, duplicate, reserved ("__metadata__") or non-UTF-8
 *                 name or metadata key/value, a duplicate metadata key, a
 *                 negative n_meta or list->n outside 0..NB_LIST_MAX, or a
 *                 header over NB_SAFETENSORS_MAX_HEADER bytes;
 *   NB_ERR_DTYPE, NB_ERR_SIZE  a tensor with an invalid dtype or ndim;
 *   NB_ERR_IO     the OS refused (the message includes strerror's text). */
nb_status nb_save_safetensors(nb_ctx *ctx, const char *path, const nb_tensor_list *list,
                              int n_meta, const char *const *meta_keys,
                              const char *const *meta_values);

/* Reads `path`, validates it completely, creates each tensor in `ctx` (no
 * grad, t->name set to its name) and appends (name, tensor) to `out` in the
 * order of the tensors' data in the file. Names are copied into ctx's arena,
 * so they live as long as the tensors.
 *
 * Dtypes: F32, F64, I64 and BOOL load as themselves; F16 and BF16 are
 * converted to F32 exactly (including subnormals, infinities and NaNs).
 * Other safetensors dtypes (I32, U8, F8_*, ...) are refused.
 *
 * Nothing is appended to `out` unless the whole file loaded. Returns NB_OK,
 * or:
 *   NB_ERR_NULL    NULL ctx, path or out;
 *   NB_ERR_IO      the file cannot be opened or read, or is not a regular file;
 *   NB_ERR_FORMAT  the file is not a valid safetensors file nabla can hold:
 *                  too short, header size over the limit or past the end,
 *                  header not UTF-8 / not a JSON object, an entry missing or
 *                  mistyping dtype, shape or data_offsets, an unsupported
 *                  dtype, a shape with zero-size dims, more than NB_MAX_DIMS
 *                  dims or a byte size that overflows, offsets that do not
 *                  match the shape, fall outside the data, overlap or leave
 *                  gaps, bytes after the last tensor, an empty name, duplicate
 *                  names, a "__metadata__" that is not an object of strings,
 *                  a BOOL byte other than 0 or 1. JSON numbers must be exact
 *                  non-negative integers no larger than 2^53;
 *   NB_ERR_SIZE    `out` has no room for the file's tensors;
 *   NB_ERR_VALUE   a name in the file is already in `out`;
 *   NB_ERR_MEMORY  out of memory. */
nb_status nb_load_safetensors(nb_ctx *ctx, const char *path, nb_tensor_list *out);

/* nb_load_safetensors that also returns the "__metadata__" pairs, in file
 * order: the first max_meta of them are stored in keys[i]/values[i] (strings
 * copied into ctx's arena) and *n_meta receives how many the file has, which
 * may exceed max_meta (as with snprintf). keys and values may be NULL when
 * max_meta is 0; n_meta may be NULL. On failure *n_meta is 0. */
nb_status nb_load_safetensors_meta(nb_ctx *ctx, const char *path, nb_tensor_list *out,
                                   int max_meta, int *n_meta, const char **keys,
                                   const char **values);

#ifdef __cplusplus
}
#endif
#endif
