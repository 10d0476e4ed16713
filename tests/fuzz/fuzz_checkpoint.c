/* fuzz_checkpoint.c - libFuzzer target: nb_load_checkpoint on any bytes, into
 * the fixed model of fuzz_input.h (params w, b; Adam; extras rng, step). A
 * load either succeeds, or fails with a message naming the loader and leaves
 * the parameters, the optimizer and the extras exactly as they were (the
 * contract in nabla/io.h). Seeds: tests/fuzz/seeds/checkpoint/, dictionary:
 * tests/fuzz/checkpoint.dict. */
#include <stdlib.h>

#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static nb_ctx *ctx;
    static nb_fuzz_model m;
    if (!ctx) {
        ctx = nb_ctx_new(0);
        if (nb_fuzz_model_init(&m))
            abort();
    }
    nb_ctx_reset(ctx);
    char path[64];
    int fd = nb_fuzz_path(data, size, path, sizeof path);
    if (fd < 0)
        return 0;
    uint64_t before = nb_fuzz_model_hash(&m);
    nb_status st = nb_load_checkpoint(ctx, path, &m.params, m.opt, &m.extra);
    close(fd);
    if (st != NB_OK) {
        const char *msg = nb_ctx_error(ctx);
        if (!msg || !strstr(msg, "load_checkpoint"))
            abort();
        if (nb_fuzz_model_hash(&m) != before)
            abort(); /* a failed load changed state */
        return 0;
    }
    /* A load that worked: put the model back for the next input. */
    nb_fuzz_model_free(&m);
    if (nb_fuzz_model_init(&m))
        abort();
    return 0;
}
