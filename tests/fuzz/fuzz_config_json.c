/* fuzz_config_json.c - libFuzzer target: nb_gpt_config_read on any bytes
 * (a model directory's config.json or the course's cfg.json). A read either
 * fails with a status and a message naming the reader (gpt_config_read, or
 * gpt_hf_config_read for GPT-2's files), leaving *out as it was, or gives a
 * config that nb_fuzz_config_ok accepts (sizes a model can be built with).
 * Seeds: tests/fuzz/seeds/config_json/ (each family in each layout, and
 * refusals), dictionary: tests/fuzz/config_json.dict. */
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
    nb_gpt_config c, keep;
    memset(&c, 0xa5, sizeof c);
    keep = c;
    nb_status st = nb_gpt_config_read(ctx, path, &c);
    close(fd);
    if (st != NB_OK) {
        const char *msg = nb_ctx_error(ctx);
        if (!msg || !strstr(msg, "config_read") || memcmp(&c, &keep, sizeof c) != 0)
            abort();
        return 0;
    }
    if (!nb_fuzz_config_ok(&c))
        abort();
    return 0;
}
