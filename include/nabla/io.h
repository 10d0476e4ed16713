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
 *   nb_list_free(&loaded); // only needed past NB_LIST_MAX tensors; harmless
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
 *                 negative n_meta, a corrupt list (n negative or past its
 *                 storage), or a header over NB_SAFETENSORS_MAX_HEADER bytes;
 *   NB_ERR_DTYPE, NB_ERR_SIZE  a tensor with an invalid dtype or ndim;
 *   NB_ERR_IO     the OS refused (the message includes strerror's text), or
 *                 path is a directory, a device such as /dev/full, a FIFO
 *                 or a socket (never replaced). */
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
 *   NB_ERR_SIZE    `out` would pass INT_MAX entries;
 *   NB_ERR_VALUE   a name in the file is already in `out`, or `out` is
 *                  corrupt (n negative or past its storage);
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

/* nb_load_safetensors one tensor at a time, for files too big to hold
 * twice (a GPT-2 checkpoint copied into a model): the whole file is
 * validated as nb_load_safetensors does first; then `header` (may be NULL)
 * is called once with every tensor as a header-only stand-in, in file
 * order (name, dtype as it loads, ndim, shape and numel set; data NULL;
 * owner NULL; valid during the call only); then `each` is called with
 * every tensor in file order, its data loaded into a private context that
 * is reset before the next one: copy what you keep. The peak memory is the
 * largest tensor. A nonzero return from a callback stops the load with that
 * status (recorded on ctx as "stopped by the caller" unless the callback
 * recorded its own error there). Errors as nb_load_safetensors; NB_ERR_NULL
 * for a NULL each. */
nb_status nb_load_safetensors_each(nb_ctx *ctx, const char *path,
                                   nb_status (*header)(void *user, const nb_tensor_list *all),
                                   nb_status (*each)(void *user, const nb_tensor *t),
                                   void *user);

/* ========================================================================
 * Training checkpoints (src/io/checkpoint.c): a whole training state in one
 * safetensors file, for exact resumption.
 *
 * A checkpoint holds
 *   - the parameters, under their own names (so the file is also a plain
 *     state_dict that PyTorch or nb_load_safetensors can read);
 *   - the optimizer's state, under "state.*" (see nb_optim_state);
 *   - extra, non-parameter state, under "extra.<name>": the dropout rng
 *     (nb_pcg32_tensor), a data cursor, anything the loop needs to go on;
 *   - metadata: "format": "nabla-checkpoint-1", "nabla_version",
 *     "optimizer": "sgd" | "adam" | "adamw" | "muon" | "none", the optimizer's options
 *     as "optimizer.lr", "optimizer.momentum", ... (Muon's AdamW group as
 *     "optimizer.adamw.lr", ...; numbers printed with 17
 *     significant digits, booleans as "true"/"false"), then the caller's
 *     pairs.
 *
 *   nb_pcg32 rng;                         // the rng the model's dropout draws from
 *   nb_tensor *cursor = nb_scalar(pctx, NB_I64, 0);  // index of the next batch
 *   nb_tensor_list extra = {0};
 *   nb_list_add(&extra, "rng", nb_pcg32_tensor(pctx, &rng));
 *   nb_list_add(&extra, "cursor", cursor);
 *   ... train ...
 *   nb_save_checkpoint(ctx, "ck.safetensors", &mha.params, opt, &extra, 0, NULL, NULL);
 *
 *   // later, in a new process: build the same model and optimizer (any
 *   // init), the same extra list, then
 *   if (nb_load_checkpoint(ctx, "ck.safetensors", &mha.params, opt, &extra))
 *       fprintf(stderr, "%s\n", nb_ctx_error(ctx));
 *   // params, optimizer state, rng and cursor are as they were when saved:
 *   // training on gives bit-identical results to never having stopped.
 *
 * Both functions follow the context rules of this header: NB_OK or an
 * error status, the message (naming the file and the entry) recorded on
 * ctx; nothing done when ctx already holds an error. */

typedef struct nb_optim nb_optim; /* nabla/optim.h */

/* Saves params, opt's state (opt may be NULL: "optimizer": "none", no
 * state), extra (may be NULL) and n_meta caller metadata pairs (keys and
 * values may be NULL when n_meta is 0) to `path`, atomically: on any
 * failure a file already at `path` is left as it was (nb_save_safetensors).
 * Only reads its arguments; copies are made in a private context.
 *
 * Errors: NB_ERR_NULL (ctx, path, params, a name or tensor), NB_ERR_VALUE
 * (a parameter or extra name that is empty, duplicated, or a parameter name
 * starting with the reserved "state." or "extra."; a caller metadata key
 * that is "format", "nabla_version", "optimizer" or starts with
 * "optimizer."; a corrupt list; an optimizer that is not built over exactly
 * the tensors of params under the same names), NB_ERR_MEMORY, and those of
 * nb_optim_state and nb_save_safetensors. Lists of any length work. */
nb_status nb_save_checkpoint(nb_ctx *ctx, const char *path, const nb_tensor_list *params,
                             nb_optim *opt, const nb_tensor_list *extra, int n_meta,
                             const char *const *keys, const char *const *values);

/* Restores a checkpoint written by nb_save_checkpoint:
 *   - every tensor of params gets the value saved under its name, with
 *     nb_params_copy_from's rules (the shape must match; F32 and F64
 *     convert into each other; names only in the file are ignored);
 *   - with opt non-NULL, the file's optimizer must be of opt's kind and
 *     its state is loaded with nb_optim_load_state (which checks it
 *     belongs to opt's parameters). opt's options are not changed: build it
 *     with the options you want to go on with (the saved ones are in the
 *     metadata). With opt NULL the optimizer state is ignored;
 *   - every tensor of extra (may be NULL) gets the value of "extra.<name>",
 *     which must have its dtype and shape exactly.
 * The file is read and everything is validated before anything changes:
 * on failure the parameters, the optimizer and the extra tensors are as
 * they were. Gradients are not touched.
 *
 * Errors: NB_ERR_NULL (ctx, path, params, an entry of params or extra);
 * those of nb_load_safetensors_meta (NB_ERR_IO unreadable, NB_ERR_FORMAT
 * corrupt or truncated, ...); NB_ERR_FORMAT when the file lacks
 * "format": "nabla-checkpoint-1"; NB_ERR_VALUE for a missing parameter or
 * extra entry, a file saved without an optimizer (or with another kind)
 * when opt is given, or an opt not built over exactly the tensors of params;
 * NB_ERR_SHAPE, NB_ERR_DTYPE for entries that do not fit; and those of
 * nb_optim_load_state. Paths that are not regular files (a FIFO, a device
 * such as /dev/zero, a directory) are NB_ERR_IO, without blocking. */
nb_status nb_load_checkpoint(nb_ctx *ctx, const char *path, const nb_tensor_list *params,
                             nb_optim *opt, const nb_tensor_list *extra);

/* An I64 tensor of shape (2) in ctx whose data IS rng's (state, inc) (the
 * two uint64 reinterpreted as int64), not a copy: put it in a checkpoint's
 * extra list, and saving records the generator while loading restores it
 * in place. rng must outlive the tensor's use. NULL (and an error on ctx)
 * for a NULL rng; NULL for a NULL ctx. */
nb_tensor *nb_pcg32_tensor(nb_ctx *ctx, struct nb_pcg32 *rng);

#ifdef __cplusplus
}
#endif
#endif
