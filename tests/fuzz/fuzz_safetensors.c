/* fuzz_safetensors.c - libFuzzer target: nb_load_safetensors_meta on any
 * bytes. A load either fails with a status and a message naming the loader,
 * or gives tensors whose every element can be read (ASan checks the bounds)
 * and metadata strings that are terminated. Seeds: tests/fuzz/seeds/safetensors/,
 * dictionary: tests/fuzz/safetensors.dict. */
#include <stdlib.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static nb_ctx *ctx;
    if (!ctx)
        ctx = nb_ctx_new(0);
    nb_ctx_reset(ctx);
    char path[64];
    int fd = nb_fuzz_path(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    nb_tensor_list out = {0};
    const char *keys[4], *values[4];
    int n_meta = -1;
    nb_status st = nb_load_safetensors_meta(ctx, path, &out, 4, &n_meta, keys, values);
    close(fd);
    if (st != NB_OK) {
        const char *msg = nb_ctx_error(ctx);
        if (!msg || !strstr(msg, "load_safetensors") || n_meta != 0)
            abort();
        return 0;
    }
    volatile double sink = 0;
    for (int i = 0; i < out.n; i++) {
        const nb_tensor *t = out.t[i];
        if (!t || strcmp(t->name, out.names[i]) != 0)
            abort();
        for (size_t k = 0; k < t->numel; k++)
            sink += nb_get(t, k);
    }
    for (int i = 0; i < n_meta && i < 4; i++)
        sink += (double)(strlen(keys[i]) + strlen(values[i]));
    (void)sink;
    return 0;
}
