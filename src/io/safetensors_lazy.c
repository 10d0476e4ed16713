/* io/safetensors_lazy.c - the copies of a lazy safetensors load
 * (nb_load_safetensors_lazy in safetensors_load.c): a tensor left in the
 * file is read straight into where it goes, so a checkpoint load holds a
 * 124M model once rather than the model and the file (io/io_internal.h). */
#include "io/io_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#define LOAD "load_safetensors"

void nb_st_lazy_free(nb_st_lazy *lz) {
    if (lz->f) fclose(lz->f);
    free(lz->refs);
    *lz = (nb_st_lazy){0};
}

/* Reads `bytes` at `offset` of the file into dst. */
static nb_status read_at(nb_ctx *ctx, const nb_st_lazy *lz, const nb_st_lazy_ref *r, void *dst) {
    if (fseeko(lz->f, (off_t)r->offset, SEEK_SET) || fread(dst, 1, r->bytes, lz->f) != r->bytes)
        return nb_io_fail(ctx, NB_ERR_IO, LOAD, lz->path, "reading tensor '%s' failed (the file "
                          "changed while it was loaded?)", r->t->name ? r->t->name : "?");
    return NB_OK;
}

nb_status nb_st_lazy_copy(nb_ctx *ctx, const nb_st_lazy *lz, void *dst, nb_dtype dt,
                          const nb_tensor *src) {
    const nb_st_lazy_ref *r = NULL;
    for (int i = 0; src->data == NULL && i < lz->n && !r; i++)
        if (lz->refs[i].t == src) r = &lz->refs[i];
    size_t bytes = src->numel * nb_dtype_size(src->dtype);
    if (r && dt == src->dtype) return read_at(ctx, lz, r, dst);
    const void *from = src->data;
    void *tmp = NULL;
    if (r) { /* another dtype: read, then convert */
        if (!(tmp = malloc(bytes))) return nb_io_fail(ctx, NB_ERR_MEMORY, LOAD, lz->path, "out of memory");
        nb_status st = read_at(ctx, lz, r, tmp);
        if (st) return free(tmp), st;
        from = tmp;
    }
    if (dt == src->dtype) memmove(dst, from, bytes);
    else if (dt == NB_F32) /* from F64 */
        for (size_t k = 0; k < src->numel; k++) ((float *)dst)[k] = (float)((const double *)from)[k];
    else
        for (size_t k = 0; k < src->numel; k++) ((double *)dst)[k] = ((const float *)from)[k];
    free(tmp);
    return NB_OK;
}

nb_status nb_load_safetensors(nb_ctx *ctx, const char *path, nb_tensor_list *out) {
    return nb_load_safetensors_meta(ctx, path, out, 0, NULL, NULL, NULL);
}

